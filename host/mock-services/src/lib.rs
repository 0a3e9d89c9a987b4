//! Mock productivity services for the assistant domain: mail, calendar, contacts, documents,
//! todo, a file store, a small CRM and a helpdesk, as stateful JSON over HTTP. One static binary
//! (`orchard-mock-services`) serves them all on the sandbox's loopback from a fixture the task
//! names; a grader reads what the agent did from each service's audit (`GET /<svc>/audit`) and
//! state, and resets them (`POST /<svc>/reset`); seeded error injection (`--faults SEED:RATE`)
//! measures robustness.

#![warn(missing_docs)]

pub mod actions;
pub mod faults;
pub mod http;
pub mod store;

pub use faults::{Fault, Faults};
pub use http::{App, Caller, grader_router, router};
pub use store::{AuditEntry, CallError, SERVICES, Store};

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    fn fixture() -> Store {
        Store::from_fixture(json!({
            "mail": {"messages": [
                {"id": "m1", "from": "ana@corp.test", "subject": "Q3 budget", "body": "Numbers attached", "labels": ["inbox"]},
                {"id": "m2", "from": "bo@corp.test", "subject": "Lunch?", "body": "Friday?", "labels": ["inbox"]}]},
            "calendar": {"events": [{"id": "e1", "title": "Standup", "start": "2026-12-07T09:00", "end": "2026-12-07T09:30",
                                      "organizer": "me@corp.test", "attendees": ["ana@corp.test"]}]},
            "contacts": [{"id": "c1", "name": "Ana", "email": "ana@corp.test"}],
            "helpdesk": {"tickets": [{"id": "t1", "status": "open", "subject": "VPN down"}]},
        }))
        .unwrap()
    }

    fn q(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn search_filters_and_crud() {
        let mut s = fixture();
        let found = s.list("mail", "messages", &q(&[("q", "budget")])).unwrap();
        assert_eq!(found["messages"].as_array().unwrap().len(), 1);
        let inbox = s.list("mail", "messages", &q(&[("labels", "inbox")])).unwrap();
        assert_eq!(inbox["messages"].as_array().unwrap().len(), 2);
        let c = s.create("contacts", "contacts", json!({"name": "Bo"})).unwrap();
        assert!(c["id"].as_str().unwrap().starts_with("contact-"));
        s.update("contacts", "contacts", "c1", json!({"phone": "555"})).unwrap();
        assert_eq!(s.get("contacts", "contacts", "c1").unwrap()["phone"], "555");
        assert_eq!(
            s.get("contacts", "contacts", "zz").unwrap_err(),
            CallError::NotFound("no contact \"zz\" in contacts".into())
        );
        s.delete("contacts", "contacts", "c1").unwrap();
        s.reset("contacts").unwrap();
        assert_eq!(s.get("contacts", "contacts", "c1").unwrap()["name"], "Ana", "reset brings the fixture back");
    }

    #[test]
    fn mail_calendar_and_helpdesk_actions() {
        let mut s = fixture();
        let sent = actions::send_mail(
            &mut s,
            json!({"to": "ana@corp.test", "subject": "Re: Q3", "body": "Thanks", "in_reply_to": "m1"}),
        )
        .unwrap();
        assert_eq!(sent["to"], json!(["ana@corp.test"]));
        assert!(
            actions::send_mail(&mut s, json!({"subject": "x", "body": "y"})).unwrap_err().to_string().contains("to:")
        );
        let labelled = actions::label(&mut s, "m2", json!({"add": ["personal"], "remove": ["inbox"]})).unwrap();
        assert_eq!(labelled["labels"], json!(["personal"]));
        let busy = actions::free_busy(
            &mut s,
            &q(&[
                ("attendees", "ana@corp.test,bo@corp.test"),
                ("from", "2026-12-07T00:00"),
                ("to", "2026-12-08T00:00"),
            ]),
        )
        .unwrap();
        assert_eq!(busy["busy"]["ana@corp.test"].as_array().unwrap().len(), 1);
        assert_eq!(busy["busy"]["bo@corp.test"].as_array().unwrap().len(), 0);
        let invited = actions::invite(&mut s, "e1", json!({"attendees": ["bo@corp.test"]})).unwrap();
        assert_eq!(invited["invitations"], json!([{"attendee": "bo@corp.test", "status": "pending"}]));
        let replied =
            actions::reply_ticket(&mut s, "t1", json!({"body": "Restarted it", "status": "resolved"})).unwrap();
        assert_eq!((replied["status"].clone(), replied["replies"].as_array().unwrap().len()), (json!("resolved"), 1));
    }

    #[test]
    fn bad_fixtures_name_what_is_wrong() {
        assert!(Store::from_fixture(json!({"bank": {}})).unwrap_err().contains("unknown service \"bank\""));
        assert!(Store::from_fixture(json!({"mail": {"messages": {}}})).unwrap_err().contains("mail.messages"));
        assert!(Store::from_fixture(json!({"contacts": [1]})).unwrap_err().contains("contacts.contacts[0]"));
    }

    #[test]
    fn faults_are_seeded_and_near_their_rate() {
        let f = Faults::parse("7:0.2").unwrap();
        let hits = (0..10_000).filter(|n| f.draw(*n).is_some()).count();
        assert!((1700..2300).contains(&hits), "{hits}");
        assert_eq!((0..50).map(|n| f.draw(n)).collect::<Vec<_>>(), (0..50).map(|n| f.draw(n)).collect::<Vec<_>>());
        assert!(Faults::parse("7:2").is_err());
    }
}
