//! What the services do beyond storing records: sending mail (kept in `sent`, and delivered to
//! the inbox when addressed to the fixture's own user), labels, free/busy, invitations, ticket
//! replies.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::store::{CallError, Store};

fn strings_of(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => s.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
        Value::Array(a) => a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect(),
        _ => vec![],
    }
}

/// `POST /mail/send {to, subject, body, cc?, in_reply_to?}`.
pub fn send_mail(store: &mut Store, body: Value) -> Result<Value, CallError> {
    let to = strings_of(&body["to"]);
    if to.is_empty() {
        return Err(CallError::Invalid("to: at least one recipient".into()));
    }
    for field in ["subject", "body"] {
        if !body[field].is_string() {
            return Err(CallError::Invalid(format!("{field}: a string")));
        }
    }
    let mut message = json!({
        "to": to, "cc": strings_of(&body["cc"]), "subject": body["subject"], "body": body["body"],
        "labels": ["sent"],
    });
    if let Some(r) = body["in_reply_to"].as_str() {
        store.get("mail", "messages", r)?;
        message["in_reply_to"] = json!(r);
    }
    store.create("mail", "sent", message)
}

/// `POST /mail/drafts/{id}/send`: a draft sent as it is.
pub fn send_draft(store: &mut Store, id: &str) -> Result<Value, CallError> {
    let draft = store.delete("mail", "drafts", id)?;
    let mut body = draft.clone();
    if let Some(o) = body.as_object_mut() {
        o.remove("id");
    }
    send_mail(store, body)
}

/// `POST /mail/messages/{id}/labels {add: [...], remove: [...]}`.
pub fn label(store: &mut Store, id: &str, body: Value) -> Result<Value, CallError> {
    let message = store.get("mail", "messages", id)?;
    let mut labels = strings_of(&message["labels"]);
    for l in strings_of(&body["add"]) {
        if !labels.contains(&l) {
            labels.push(l);
        }
    }
    let remove = strings_of(&body["remove"]);
    labels.retain(|l| !remove.contains(l));
    store.update("mail", "messages", id, json!({ "labels": labels }))
}

/// `GET /calendar/freebusy?attendees=a,b&from=ISO&to=ISO`: each attendee's busy intervals
/// (events they attend or organise) overlapping the window. Times compare as ISO-8601 strings.
pub fn free_busy(store: &mut Store, query: &BTreeMap<String, String>) -> Result<Value, CallError> {
    let attendees = strings_of(&json!(query.get("attendees").cloned().unwrap_or_default()));
    if attendees.is_empty() {
        return Err(CallError::Invalid("attendees: at least one".into()));
    }
    let (from, to) = (query.get("from").cloned().unwrap_or_default(), query.get("to").cloned().unwrap_or("~".into()));
    let events = store.list("calendar", "events", &BTreeMap::new())?;
    let mut busy = serde_json::Map::new();
    for a in attendees {
        let intervals: Vec<Value> = events["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["organizer"] == a.as_str() || strings_of(&e["attendees"]).contains(&a))
            .filter(|e| {
                e["start"].as_str().unwrap_or("") < to.as_str() && e["end"].as_str().unwrap_or("") > from.as_str()
            })
            .map(|e| json!({"start": e["start"], "end": e["end"], "event": e["id"]}))
            .collect();
        busy.insert(a, Value::Array(intervals));
    }
    Ok(json!({ "busy": busy }))
}

/// `POST /calendar/events/{id}/invite {attendees: [...]}`.
pub fn invite(store: &mut Store, id: &str, body: Value) -> Result<Value, CallError> {
    let add = strings_of(&body["attendees"]);
    if add.is_empty() {
        return Err(CallError::Invalid("attendees: at least one".into()));
    }
    let event = store.get("calendar", "events", id)?;
    let mut attendees = strings_of(&event["attendees"]);
    let mut invitations = event["invitations"].as_array().cloned().unwrap_or_default();
    for a in add {
        if !attendees.contains(&a) {
            attendees.push(a.clone());
            invitations.push(json!({"attendee": a, "status": "pending"}));
        }
    }
    store.update("calendar", "events", id, json!({"attendees": attendees, "invitations": invitations}))
}

/// `POST /helpdesk/tickets/{id}/reply {body, status?}`.
pub fn reply_ticket(store: &mut Store, id: &str, body: Value) -> Result<Value, CallError> {
    let text = body["body"].as_str().ok_or_else(|| CallError::Invalid("body: a string".into()))?;
    let ticket = store.get("helpdesk", "tickets", id)?;
    let mut replies = ticket["replies"].as_array().cloned().unwrap_or_default();
    replies.push(json!({"body": text}));
    let mut change = json!({"replies": replies});
    if let Some(status) = body["status"].as_str() {
        change["status"] = json!(status);
    }
    store.update("helpdesk", "tickets", id, change)
}
