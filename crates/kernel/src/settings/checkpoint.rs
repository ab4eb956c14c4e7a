//! How often a run saves a checkpoint: `--checkpoint-every` on the command line, or the
//! scenario's `checkpoint:` section. An execution setting, like the number of threads: it is
//! not part of the resolved scenario (nor of its content hash), so a run's id and files do not
//! depend on it.

use super::FieldError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How often a run saves a checkpoint (`--checkpoint-every`): at the first point where the run
/// can be saved (a synchronous round's start, an update's arrival under FedBuff, a peer's mixed
/// model reaching the monitor) after this many rounds, or this much wall-clock time, since the
/// last one. By default every minute: a run shorter than a
/// minute writes none. A wall-clock cadence also waits nine times as long as the last
/// checkpoint took to write, so that checkpoints never take more than a tenth of a run (a
/// FEMNIST run's clients keep gigabytes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CheckpointEvery {
    Off,
    Rounds(u32),
    Wall(Duration),
}

impl Default for CheckpointEvery {
    fn default() -> Self {
        CheckpointEvery::Wall(Duration::from_secs(60))
    }
}

impl std::str::FromStr for CheckpointEvery {
    type Err = String;

    /// `off`, a number of rounds (`10`), or a wall-clock time (`90s`, `5m`, `1h`).
    fn from_str(text: &str) -> Result<Self, String> {
        let wrong = || {
            format!(
                "`{text}`: give `off`, a number of rounds (e.g. `10`), or a wall-clock time in \
                 seconds, minutes or hours (e.g. `90s`, `5m`, `1h`), more than 0"
            )
        };
        let text = text.trim();
        if text == "off" {
            return Ok(CheckpointEvery::Off);
        }
        if let Ok(rounds) = text.parse::<u32>() {
            return (rounds > 0)
                .then_some(CheckpointEvery::Rounds(rounds))
                .ok_or_else(wrong);
        }
        let split = text.len().saturating_sub(1);
        let (number, unit) = text.split_at(split);
        let seconds = match unit {
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(wrong()),
        };
        match number.parse::<f64>().map(|n| n * seconds) {
            Ok(s) if s > 0.0 && s <= super::LONGEST_SECONDS => {
                Ok(CheckpointEvery::Wall(Duration::from_secs_f64(s)))
            }
            _ => Err(wrong()),
        }
    }
}

/// The scenario's `checkpoint:` section: one of its fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSpec {
    /// Save one every this many rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_rounds: Option<u32>,
    /// Save one every this many seconds of wall-clock time (the default: 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_seconds: Option<f64>,
    /// Save none.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub off: bool,
}

impl CheckpointSpec {
    /// The cadence it asks for; an error names the field.
    pub fn every(&self) -> Result<CheckpointEvery, FieldError> {
        let given = [
            self.every_rounds.is_some(),
            self.every_seconds.is_some(),
            self.off,
        ];
        if given.iter().filter(|&&g| g).count() != 1 {
            return Err(FieldError::new(
                String::new(),
                "give one of `every_rounds: N`, `every_seconds: S` or `off: true`".into(),
            ));
        }
        match (self.every_rounds, self.every_seconds) {
            (Some(0), _) => Err(FieldError::new(
                "every_rounds".into(),
                "must be at least 1 (or `off: true` for no checkpoints)".into(),
            )),
            (Some(n), _) => Ok(CheckpointEvery::Rounds(n)),
            (_, Some(s)) if s > 0.0 && s <= super::LONGEST_SECONDS => {
                Ok(CheckpointEvery::Wall(Duration::from_secs_f64(s)))
            }
            (_, Some(s)) => Err(FieldError::new(
                "every_seconds".into(),
                format!("must be more than 0 (seconds of wall-clock time), got {s}"),
            )),
            (None, None) => Ok(CheckpointEvery::Off),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cadence_reads_from_the_command_line_and_the_scenario() {
        assert_eq!("off".parse(), Ok(CheckpointEvery::Off));
        assert_eq!("10".parse(), Ok(CheckpointEvery::Rounds(10)));
        assert_eq!(
            "90s".parse(),
            Ok(CheckpointEvery::Wall(Duration::from_secs(90)))
        );
        assert_eq!(
            "1.5m".parse(),
            Ok(CheckpointEvery::Wall(Duration::from_secs(90)))
        );
        for wrong in ["0", "-3", "5x", "m", "0s", "", "1e30s", "infh", "NaNm"] {
            let e = wrong.parse::<CheckpointEvery>().unwrap_err();
            assert!(e.contains("give `off`"), "{wrong}: {e}");
        }
        let spec = |rounds, seconds, off| CheckpointSpec {
            every_rounds: rounds,
            every_seconds: seconds,
            off,
        };
        assert_eq!(
            spec(Some(5), None, false).every(),
            Ok(CheckpointEvery::Rounds(5))
        );
        assert_eq!(
            spec(None, Some(30.0), false).every(),
            Ok(CheckpointEvery::Wall(Duration::from_secs(30)))
        );
        assert_eq!(spec(None, None, true).every(), Ok(CheckpointEvery::Off));
        let e = spec(Some(5), Some(30.0), false).every().unwrap_err();
        assert!(e.message.contains("give one of"), "{e}");
        assert!(spec(None, None, false).every().is_err());
        assert_eq!(
            spec(Some(0), None, false).every().unwrap_err().path,
            "every_rounds"
        );
        assert_eq!(
            spec(None, Some(-1.0), false).every().unwrap_err().path,
            "every_seconds"
        );
    }
}
