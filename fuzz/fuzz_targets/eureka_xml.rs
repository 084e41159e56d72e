#![no_main]
//! The discovery server's XML readers (`discovery/src/model/xml.rs`): a registration and a
//! registry document, and the content-type sniffing in front of them. What one reads, written
//! as JSON, reads back the same; written as XML (which leaves out what XML cannot name), it
//! reads back as a document that, written and read again, is the same.

use cluster_discovery::model::{self, json, xml};

/// The time the readers fill in where a client left a timestamp out.
const NOW: u64 = 1_700_000_000_000;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = model::read_instance(None, data, NOW);
    if let Ok(i) = xml::read_instance(data, NOW) {
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
    if let Ok(apps) = xml::read_applications(data, NOW) {
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
