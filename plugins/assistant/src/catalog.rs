//! The standard tools for each of `orchard-mock-services`' services, so that a task names the
//! services it uses (`services = ["mail", "calendar"]`) instead of describing every route. The
//! names follow Claw-Eval's (`<service>_<verb>`).

use serde_json::{Value, json};

/// (service, tool name, description, method, route, parameters' properties, required).
type Entry = (&'static str, &'static str, &'static str, &'static str, &'static str, Value, &'static [&'static str]);

fn s(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

fn list(description: &str) -> Value {
    json!({"type": "array", "items": {"type": "string"}, "description": description})
}

fn n(description: &str) -> Value {
    json!({"type": "integer", "description": description})
}

fn entries() -> Vec<Entry> {
    let search = |extra: Value| {
        let mut p = json!({"q": s("Words to look for in any field"), "limit": n("At most this many results")});
        if let (Some(p), Value::Object(extra)) = (p.as_object_mut(), extra) {
            p.extend(extra);
        }
        p
    };
    vec![
        (
            "mail",
            "mail_search",
            "Search the mailbox's messages (all of them when no filter is given)",
            "GET",
            "/mail/messages",
            search(json!({"from": s("Sender address, exactly"), "labels": s("A label, e.g. inbox")})),
            &[],
        ),
        (
            "mail",
            "mail_read",
            "Read one message by its id",
            "GET",
            "/mail/messages/{id}",
            json!({"id": s("Message id")}),
            &["id"],
        ),
        (
            "mail",
            "mail_send",
            "Send an email",
            "POST",
            "/mail/send",
            json!({"to": list("Recipients' addresses"), "cc": list("Copied addresses"), "subject": s("Subject"),
                   "body": s("Body text"), "in_reply_to": s("Id of the message this answers")}),
            &["to", "subject", "body"],
        ),
        (
            "mail",
            "mail_draft",
            "Save a draft without sending it",
            "POST",
            "/mail/drafts",
            json!({"to": list("Recipients' addresses"), "cc": list("Copied addresses"), "subject": s("Subject"),
                   "body": s("Body text"), "in_reply_to": s("Id of the message this answers")}),
            &["to", "subject", "body"],
        ),
        ("mail", "mail_list_drafts", "List saved drafts", "GET", "/mail/drafts", search(json!({})), &[]),
        (
            "mail",
            "mail_send_draft",
            "Send a saved draft as it is",
            "POST",
            "/mail/drafts/{id}/send",
            json!({"id": s("Draft id")}),
            &["id"],
        ),
        (
            "mail",
            "mail_label",
            "Add or remove labels on a message",
            "POST",
            "/mail/messages/{id}/labels",
            json!({"id": s("Message id"), "add": list("Labels to add"), "remove": list("Labels to remove")}),
            &["id"],
        ),
        (
            "calendar",
            "calendar_list_events",
            "List calendar events (search with q)",
            "GET",
            "/calendar/events",
            search(json!({})),
            &[],
        ),
        (
            "calendar",
            "calendar_get_event",
            "Read one event",
            "GET",
            "/calendar/events/{id}",
            json!({"id": s("Event id")}),
            &["id"],
        ),
        (
            "calendar",
            "calendar_create_event",
            "Create an event",
            "POST",
            "/calendar/events",
            json!({"title": s("Title"), "start": s("Start, ISO 8601 local time (2026-12-07T09:00)"), "end": s("End, ISO 8601"),
                   "attendees": list("Attendees' addresses"), "location": s("Where"), "description": s("Notes")}),
            &["title", "start", "end"],
        ),
        (
            "calendar",
            "calendar_update_event",
            "Change fields of an event",
            "PATCH",
            "/calendar/events/{id}",
            json!({"id": s("Event id"), "title": s("Title"), "start": s("Start"), "end": s("End"), "location": s("Where")}),
            &["id"],
        ),
        (
            "calendar",
            "calendar_delete_event",
            "Delete an event",
            "DELETE",
            "/calendar/events/{id}",
            json!({"id": s("Event id")}),
            &["id"],
        ),
        (
            "calendar",
            "calendar_free_busy",
            "Busy intervals of people between two times",
            "GET",
            "/calendar/freebusy",
            json!({"attendees": list("Addresses"), "from": s("Window start, ISO 8601"), "to": s("Window end, ISO 8601")}),
            &["attendees"],
        ),
        (
            "calendar",
            "calendar_invite",
            "Invite people to an event",
            "POST",
            "/calendar/events/{id}/invite",
            json!({"id": s("Event id"), "attendees": list("Addresses to invite")}),
            &["id", "attendees"],
        ),
        ("contacts", "contacts_search", "Search contacts", "GET", "/contacts/contacts", search(json!({})), &[]),
        (
            "contacts",
            "contacts_get",
            "Read one contact",
            "GET",
            "/contacts/contacts/{id}",
            json!({"id": s("Contact id")}),
            &["id"],
        ),
        (
            "contacts",
            "contacts_create",
            "Add a contact",
            "POST",
            "/contacts/contacts",
            json!({"name": s("Full name"), "email": s("Address"), "phone": s("Phone"), "company": s("Company"), "notes": s("Notes")}),
            &["name"],
        ),
        (
            "contacts",
            "contacts_update",
            "Change fields of a contact",
            "PATCH",
            "/contacts/contacts/{id}",
            json!({"id": s("Contact id"), "name": s("Full name"), "email": s("Address"), "phone": s("Phone"), "company": s("Company"), "notes": s("Notes")}),
            &["id"],
        ),
        (
            "contacts",
            "contacts_delete",
            "Delete a contact",
            "DELETE",
            "/contacts/contacts/{id}",
            json!({"id": s("Contact id")}),
            &["id"],
        ),
        ("docs", "docs_search", "Search documents and notes", "GET", "/docs/docs", search(json!({})), &[]),
        ("docs", "docs_read", "Read one document", "GET", "/docs/docs/{id}", json!({"id": s("Document id")}), &["id"]),
        (
            "docs",
            "docs_create",
            "Write a new document or note",
            "POST",
            "/docs/docs",
            json!({"title": s("Title"), "body": s("Text"), "tags": list("Tags")}),
            &["title", "body"],
        ),
        (
            "docs",
            "docs_update",
            "Change a document",
            "PATCH",
            "/docs/docs/{id}",
            json!({"id": s("Document id"), "title": s("Title"), "body": s("Text"), "tags": list("Tags")}),
            &["id"],
        ),
        (
            "todo",
            "todo_list",
            "List tasks (filter by status: open, done)",
            "GET",
            "/todo/tasks",
            search(json!({"status": s("open or done")})),
            &[],
        ),
        (
            "todo",
            "todo_create",
            "Add a task",
            "POST",
            "/todo/tasks",
            json!({"title": s("What to do"), "due": s("Due date, ISO 8601"), "priority": s("low, normal or high"), "status": s("open or done")}),
            &["title"],
        ),
        (
            "todo",
            "todo_update",
            "Change a task (e.g. status done)",
            "PATCH",
            "/todo/tasks/{id}",
            json!({"id": s("Task id"), "title": s("What to do"), "due": s("Due date"), "priority": s("Priority"), "status": s("open or done")}),
            &["id"],
        ),
        ("todo", "todo_delete", "Delete a task", "DELETE", "/todo/tasks/{id}", json!({"id": s("Task id")}), &["id"]),
        ("files", "files_list", "List stored files", "GET", "/files/files", search(json!({})), &[]),
        ("files", "files_read", "Read a stored file", "GET", "/files/files/{id}", json!({"id": s("File id")}), &["id"]),
        (
            "files",
            "files_write",
            "Store a new file",
            "POST",
            "/files/files",
            json!({"name": s("File name"), "content": s("Text content")}),
            &["name", "content"],
        ),
        ("crm", "crm_search_accounts", "Search customer accounts", "GET", "/crm/accounts", search(json!({})), &[]),
        (
            "crm",
            "crm_get_account",
            "Read one account",
            "GET",
            "/crm/accounts/{id}",
            json!({"id": s("Account id")}),
            &["id"],
        ),
        (
            "crm",
            "crm_update_account",
            "Change fields of an account",
            "PATCH",
            "/crm/accounts/{id}",
            json!({"id": s("Account id"), "owner": s("Owner"), "tier": s("Tier"), "notes": s("Notes")}),
            &["id"],
        ),
        (
            "crm",
            "crm_search_deals",
            "Search deals",
            "GET",
            "/crm/deals",
            search(json!({"stage": s("Stage, exactly")})),
            &[],
        ),
        (
            "crm",
            "crm_update_deal",
            "Change fields of a deal",
            "PATCH",
            "/crm/deals/{id}",
            json!({"id": s("Deal id"), "stage": s("Stage"), "amount": n("Amount"), "notes": s("Notes")}),
            &["id"],
        ),
        (
            "helpdesk",
            "helpdesk_search_tickets",
            "Search support tickets",
            "GET",
            "/helpdesk/tickets",
            search(json!({"status": s("open, pending or closed")})),
            &[],
        ),
        (
            "helpdesk",
            "helpdesk_get_ticket",
            "Read one ticket",
            "GET",
            "/helpdesk/tickets/{id}",
            json!({"id": s("Ticket id")}),
            &["id"],
        ),
        (
            "helpdesk",
            "helpdesk_reply",
            "Reply to a ticket's requester (optionally setting its status)",
            "POST",
            "/helpdesk/tickets/{id}/reply",
            json!({"id": s("Ticket id"), "body": s("Reply text"), "status": s("open, pending or closed")}),
            &["id", "body"],
        ),
        (
            "helpdesk",
            "helpdesk_update_ticket",
            "Change fields of a ticket",
            "PATCH",
            "/helpdesk/tickets/{id}",
            json!({"id": s("Ticket id"), "status": s("open, pending or closed"), "priority": s("Priority"), "assignee": s("Assignee")}),
            &["id"],
        ),
    ]
}

/// Every service with standard tools.
pub fn services() -> Vec<&'static str> {
    let mut names: Vec<&str> = entries().iter().map(|e| e.0).collect();
    names.dedup();
    names
}

/// The standard tools of `service`, in the adapter's configuration shape (on `port`); `None`
/// for a service without them.
pub fn tools_of(service: &str, port: u16) -> Option<Vec<Value>> {
    let tools: Vec<Value> = entries()
        .into_iter()
        .filter(|e| e.0 == service)
        .map(|(_, name, description, method, route, properties, required)| {
            json!({"name": name, "description": description, "method": method, "port": port, "route": route,
                   "parameters": {"type": "object", "properties": properties, "required": required}})
        })
        .collect();
    (!tools.is_empty()).then_some(tools)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_standard_tool_names_its_route_parameters_and_is_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for service in services() {
            for t in tools_of(service, 8900).unwrap() {
                let name = t["name"].as_str().unwrap();
                assert!(seen.insert(name.to_string()), "{name} twice");
                assert!(name.starts_with(service), "{name} belongs to {service}");
                let route = t["route"].as_str().unwrap();
                assert!(route.starts_with(&format!("/{service}/")), "{route}");
                for part in route.split('/').filter(|p| p.starts_with('{')) {
                    let param = part.trim_matches(|c| c == '{' || c == '}');
                    assert!(t["parameters"]["properties"][param].is_object(), "{name}: {param} undescribed");
                    assert!(
                        t["parameters"]["required"].as_array().unwrap().iter().any(|r| r == param),
                        "{name}: {param} optional"
                    );
                }
            }
        }
        assert_eq!(services(), ["mail", "calendar", "contacts", "docs", "todo", "files", "crm", "helpdesk"]);
        assert!(tools_of("weather", 8900).is_none());
    }
}
