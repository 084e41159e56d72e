#![no_main]
//! The discovery server's JSON readers (`discovery/src/model/json/read.rs`): a registration,
//! an application, a registry document. What one reads, written again as JSON, reads back the
//! same; written as XML (which leaves out what XML cannot name), it reads back as a document
//! that, written and read again, is the same.

use cluster_discovery::model::{json, xml};

/// The time the readers fill in where a client left a timestamp out.
const NOW: u64 = 1_700_000_000_000;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(i) = json::read_instance(data, NOW) {
        assert_eq!(
            json::read_instance(&json::write_instance(&i), NOW),
            Ok(i.clone())
        );
        let once =
            xml::read_instance(&xml::write_instance(&i), NOW).expect("the XML written reads");
        assert_eq!(
            xml::read_instance(&xml::write_instance(&once), NOW),
            Ok(once)
        );
    }
    if let Ok(a) = json::read_application(data, NOW) {
        assert_eq!(
            json::read_application(&json::write_application(&a), NOW),
            Ok(a)
        );
    }
    if let Ok(apps) = json::read_applications(data, NOW) {
        let again = json::read_applications(&json::write_applications(&apps), NOW);
        assert_eq!(again, Ok(apps.clone()));
        let once = xml::read_applications(&xml::write_applications(&apps), NOW)
            .expect("the XML written reads");
        assert_eq!(
            xml::read_applications(&xml::write_applications(&once), NOW),
            Ok(once)
        );
    }
});
