//! What a scenario needs in memory, estimated before anything is built, and checked against
//! the machine: a run that cannot fit is refused by `fedsim check` with the estimate, instead
//! of exhausting memory an hour later. The estimate is a lower bound (every client at its
//! minimum size, a small fixed cost per client), so a run that could fit is never refused.

use crate::data::DatasetSpec;
use crate::FieldError;

/// Bytes per client that any run spends at least beside the data (its drawn device, its id,
/// its size), whatever the model: measured at about 39 bytes with rows made on demand and
/// clients asleep (`cargo bench --bench scale`, 10⁶ → 10⁷ clients); 32 are counted.
const LEAST_BYTES_PER_CLIENT: f64 = 32.0;

/// The least memory a run of `data` needs: `(total, data)` in bytes.
pub fn least_bytes(data: &DatasetSpec) -> Option<(f64, f64)> {
    let (rows, dim) = data.least_rows()?;
    // f32 features and an i64 label per row.
    let data_bytes = rows * (dim as f64 * 4.0 + 8.0);
    let clients = data.num_clients().unwrap_or(0) as f64;
    Some((data_bytes + clients * LEAST_BYTES_PER_CLIENT, data_bytes))
}

/// This process's peak resident memory so far in bytes (Linux's `VmHWM`; `None` elsewhere).
pub fn peak_memory() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    let kb: f64 = kb.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb * 1024.0)
}

/// The memory this process may use: the cgroup's limit where one is set, else the machine's
/// total memory (`None` where neither can be read).
pub fn machine_memory() -> Option<f64> {
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok());
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map(|kb| kb * 1024.0)
    });
    match (cgroup, total) {
        (Some(c), Some(t)) => Some(c.min(t)),
        (c, t) => c.or(t),
    }
}

/// Bytes for people: `12.3 GiB`.
pub fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = b;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// Refuses a data set whose least memory exceeds `available`.
pub fn check_fits(data: &DatasetSpec, available: Option<f64>) -> Result<(), FieldError> {
    let (Some((total, data_bytes)), Some(available)) = (least_bytes(data), available) else {
        return Ok(());
    };
    if total <= available {
        return Ok(());
    }
    let clients = data.num_clients().unwrap_or(0);
    let data_part = if data_bytes > 0.0 {
        format!(
            "{} of data, every client at its minimum size",
            human_bytes(data_bytes)
        )
    } else {
        "no rows held: they are made on demand".into()
    };
    let can_make_on_demand = match data {
        DatasetSpec::FedemSynthetic(s) => !s.on_demand,
        DatasetSpec::SyntheticAb(s) => !s.on_demand,
        DatasetSpec::FedgmmSynthetic(s) => !s.on_demand,
        _ => false,
    };
    let hint = if can_make_on_demand {
        ", or `data.on_demand: true` to make each client's rows only when a job needs them"
    } else {
        ""
    };
    Err(FieldError::new(
        "data.clients".into(),
        format!(
            "{clients} clients need at least {} of memory ({data_part}, and {} of per-client \
             state), more than this machine's {}; use fewer clients or smaller ones{hint}",
            human_bytes(total),
            human_bytes(total - data_bytes),
            human_bytes(available),
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fedem(clients: usize) -> DatasetSpec {
        serde_yaml::from_str(&format!(
            "{{kind: fedem_synthetic, clients: {clients}, dim: 10}}"
        ))
        .unwrap()
    }

    #[test]
    fn least_bytes_by_hand() {
        // min_samples defaults to 50 (FedEM's generator): 50 rows of 10 f32 and an i64 label.
        let (total, data) = least_bytes(&fedem(1000)).unwrap();
        assert_eq!(data, 1000.0 * 50.0 * 48.0);
        assert_eq!(total, data + 1000.0 * 32.0);
        let on_demand =
            serde_yaml::from_str("{kind: fedem_synthetic, clients: 1000, on_demand: true}");
        assert_eq!(least_bytes(&on_demand.unwrap()), Some((1000.0 * 32.0, 0.0)));
    }

    #[test]
    fn refuses_what_cannot_fit_and_says_how_much() {
        let crate::FieldError { path, message } =
            check_fits(&fedem(100_000_000_000), Some(24.0 * 1024f64.powi(3))).unwrap_err();
        assert_eq!(path, "data.clients");
        assert!(
            message.starts_with("100000000000 clients need at least 221.2 TiB of memory"),
            "{message}"
        );
        assert!(
            message.contains("more than this machine's 24.0 GiB"),
            "{message}"
        );
        assert!(check_fits(&fedem(1000), Some(1e9)).is_ok());
        assert!(
            check_fits(&fedem(100_000_000_000), None).is_ok(),
            "unknown: not refused"
        );
    }

    #[test]
    fn the_machine_has_some_memory() {
        assert!(machine_memory().is_some_and(|m| m > 1e8));
    }
}
