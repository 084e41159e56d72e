//! The log filter the example binaries install.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

/// tarpc's modules that log every deadline they enforce at ERROR. An attempt running out of time
/// is an expected outcome, which the call path reports itself (in the call's error, at DEBUG in
/// its span); logged as an error on both sides of every timeout, it would bury real errors.
const TARPC_DEADLINES: [&str; 2] = [
    "tarpc::client::in_flight_requests",
    "tarpc::server::in_flight_requests",
];

/// tarpc's server logs a WARN for every connection a peer closes without a TLS close_notify,
/// which is every connection of a peer that shuts down: ordinary, and said at DEBUG by us.
const TARPC_SERVER: &str = "tarpc::server=error";

/// `RUST_LOG`'s directives (ERROR when it is unset), with tarpc's deadline lines off and its
/// server's connection-closed WARNs down to errors, unless `RUST_LOG` names tarpc itself.
pub fn log_filter() -> EnvFilter {
    filter_for(&std::env::var("RUST_LOG").unwrap_or_default())
}

fn filter_for(rust_log: &str) -> EnvFilter {
    let mut filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::ERROR.into())
        .parse_lossy(rust_log);
    if !rust_log.contains("tarpc") {
        for module in TARPC_DEADLINES {
            if let Ok(off) = format!("{module}=off").parse() {
                filter = filter.add_directive(off);
            }
        }
        if let Ok(quiet) = TARPC_SERVER.parse() {
            filter = filter.add_directive(quiet);
        }
    }
    filter
}

#[cfg(test)]
mod tests {
    use super::filter_for;

    #[test]
    fn tarpcs_deadline_errors_are_off_unless_asked_for() {
        let quiet = filter_for("").to_string();
        assert!(
            quiet.contains("tarpc::client::in_flight_requests=off"),
            "{quiet}"
        );
        assert!(
            filter_for("info")
                .to_string()
                .contains("tarpc::server::in_flight_requests=off")
        );
        let asked = filter_for("tarpc=trace").to_string();
        assert!(!asked.contains("=off"), "{asked}");
    }
}
