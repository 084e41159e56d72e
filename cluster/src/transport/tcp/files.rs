//! Connection bounds that fit the process's file limit. A node whose sockets use every file
//! handle can no longer accept: the legitimate caller waits in the kernel's queue behind the
//! connections that exhausted it. So the bounds on connections opening and established are
//! lowered to a share of `RLIMIT_NOFILE`, leaving the rest for the node's own connections to
//! its peers, its gossip socket and files.

use super::serve::ServeConfig;

/// The process's soft limit on open files, if it has one (read from `/proc/self/limits`:
/// Linux; elsewhere the bounds are used as given).
fn file_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    soft_file_limit(&limits)
}

/// The soft limit in the `Max open files` row of a `/proc/<pid>/limits` table.
fn soft_file_limit(limits: &str) -> Option<usize> {
    let row = limits.lines().find(|l| l.starts_with("Max open files"))?;
    row["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The bounds on connections opening and established that this process can hold: at most a
/// quarter of its file limit opening and half established.
pub(super) fn fit(config: &ServeConfig) -> (usize, usize) {
    fit_within(config.max_opening, config.max_connections, file_limit())
}

fn fit_within(opening: usize, established: usize, files: Option<usize>) -> (usize, usize) {
    let Some(files) = files else {
        return (opening, established);
    };
    let fitted = (
        opening.min(files / 4).max(1),
        established.min(files / 2).max(1),
    );
    if fitted != (opening, established) {
        tracing::info!(
            "the file limit is {files}: at most {} connections opening and {} established (asked for {opening} and {established}); raise `ulimit -n` for more",
            fitted.0,
            fitted.1
        );
    }
    fitted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounds_fit_the_file_limit() {
        assert_eq!(fit_within(256, 1024, Some(1024)), (256, 512));
        assert_eq!(fit_within(256, 1024, Some(1 << 20)), (256, 1024));
        assert_eq!(fit_within(256, 1024, None), (256, 1024));
        assert_eq!(fit_within(256, 1024, Some(2)), (1, 1));
        let table = "Limit                     Soft Limit           Hard Limit           Units\n\
                     Max open files            1024                 524288               files\n";
        assert_eq!(soft_file_limit(table), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(soft_file_limit(unlimited), None);
        assert!(file_limit().is_some_and(|n| n > 0));
    }
}
