//! How much memory this process has used and may use (Linux's `/proc` and cgroup files;
//! `None` elsewhere). Read only, for the pre-flight's estimates, the run's report and the spill
//! file's budget.

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
