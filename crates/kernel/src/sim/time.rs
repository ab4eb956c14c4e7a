//! Integer virtual time. One tick is one microsecond; no floating point decides an order.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A point in simulated time, in microseconds since the start of the run.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct SimTime(pub u64);

/// A span of simulated time, in microseconds.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct SimDuration(pub u64);

impl SimTime {
    pub const ZERO: SimTime = SimTime(0);
    /// "Never": later than any event.
    pub const MAX: SimTime = SimTime(u64::MAX);
    /// The latest time an event can be at: 2⁶³ µs (about 292 000 years). Later times are
    /// refused by the scheduler (never saturated silently); past it only [`SimTime::MAX`]
    /// stands for "never".
    pub const LAST: SimTime = SimTime(1 << 63);

    /// `self + d` where it is at most [`SimTime::LAST`].
    pub fn checked_add(self, d: SimDuration) -> Option<SimTime> {
        self.0
            .checked_add(d.0)
            .filter(|&t| t <= Self::LAST.0)
            .map(SimTime)
    }

    pub fn micros(self) -> u64 {
        self.0
    }

    /// Seconds as a float, for reports only (never for ordering).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }
}

impl SimDuration {
    pub const ZERO: SimDuration = SimDuration(0);

    pub fn from_micros(us: u64) -> Self {
        SimDuration(us)
    }

    pub fn from_millis(ms: u64) -> Self {
        SimDuration(ms.saturating_mul(1_000))
    }

    pub fn from_secs(s: u64) -> Self {
        SimDuration(s.saturating_mul(1_000_000))
    }

    /// The longest duration a model may give: 2⁶² µs (about 146 000 years), so that a time
    /// plus a duration never wraps.
    pub const LONGEST: SimDuration = SimDuration(crate::settings::LONGEST_MICROS);

    /// Seconds from a model's float parameters, rounded up to a whole microsecond, where they
    /// are at most [`SimDuration::LONGEST`]: `None` for more, infinity or NaN (which a caller
    /// reports, naming where the seconds came from). Negative inputs give zero.
    pub fn try_from_secs(s: f64) -> Option<Self> {
        let us = (s * 1e6).ceil();
        if us.is_nan() || us > Self::LONGEST.0 as f64 {
            None
        } else {
            Some(Self::from_secs_f64_ceil(s))
        }
    }

    /// Seconds from a model's float parameters, rounded up to a whole microsecond (so a
    /// positive duration never becomes zero). Negative or NaN inputs give zero; more than a
    /// u64 of microseconds saturates (use [`SimDuration::try_from_secs`] where the seconds
    /// come from a user's numbers).
    pub fn from_secs_f64_ceil(s: f64) -> Self {
        let us = (s * 1e6).ceil();
        if us.is_nan() || us <= 0.0 {
            SimDuration::ZERO
        } else if us >= u64::MAX as f64 {
            SimDuration(u64::MAX)
        } else {
            SimDuration(us as u64)
        }
    }

    pub fn micros(self) -> u64 {
        self.0
    }

    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }
}

impl Add<SimDuration> for SimTime {
    type Output = SimTime;
    fn add(self, d: SimDuration) -> SimTime {
        SimTime(self.0.saturating_add(d.0))
    }
}

impl AddAssign<SimDuration> for SimTime {
    fn add_assign(&mut self, d: SimDuration) {
        self.0 = self.0.saturating_add(d.0);
    }
}

impl Add for SimDuration {
    type Output = SimDuration;
    fn add(self, d: SimDuration) -> SimDuration {
        SimDuration(self.0.saturating_add(d.0))
    }
}

impl Sub for SimTime {
    type Output = SimDuration;
    fn sub(self, earlier: SimTime) -> SimDuration {
        SimDuration(self.0.saturating_sub(earlier.0))
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:06}s", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_is_integer_and_saturating() {
        let t = SimTime(1_500_000) + SimDuration::from_millis(250);
        assert_eq!(t, SimTime(1_750_000));
        assert_eq!(t.to_string(), "1.750000s");
        assert_eq!(SimTime(5) - SimTime(9), SimDuration::ZERO);
        assert_eq!(SimTime(u64::MAX) + SimDuration(1), SimTime(u64::MAX));
    }

    #[test]
    fn durations_past_the_longest_are_not_represented() {
        assert_eq!(
            SimDuration::try_from_secs(1.5),
            Some(SimDuration(1_500_000))
        );
        assert_eq!(SimDuration::try_from_secs(-1.0), Some(SimDuration::ZERO));
        // 2⁶² µs is 4 611 686 018 427.4 s.
        assert!(SimDuration::try_from_secs(4.6e12).is_some());
        assert_eq!(SimDuration::try_from_secs(4.7e12), None);
        assert_eq!(SimDuration::try_from_secs(f64::INFINITY), None);
        assert_eq!(SimDuration::try_from_secs(f64::NAN), None);
        let last = SimTime::LAST;
        assert_eq!(SimTime(5).checked_add(SimDuration(7)), Some(SimTime(12)));
        assert_eq!(last.checked_add(SimDuration(1)), None);
        assert_eq!(SimTime(u64::MAX - 1).checked_add(SimDuration(5)), None);
    }
}
