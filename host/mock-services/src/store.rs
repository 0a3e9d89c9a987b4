//! The services' state: named collections of JSON records per service, loaded from a fixture,
//! with every call on record (the audit a grader reads) and a reset to the fixture.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value, json};

/// The services and their collections (the first is the one `/<svc>` lists by default).
pub const SERVICES: &[(&str, &[&str])] = &[
    ("mail", &["messages", "drafts", "sent"]),
    ("calendar", &["events"]),
    ("contacts", &["contacts"]),
    ("docs", &["docs"]),
    ("todo", &["tasks"]),
    ("files", &["files"]),
    ("crm", &["accounts", "deals"]),
    ("helpdesk", &["tickets"]),
];

#[derive(Debug, thiserror::Error, PartialEq)]
/// Why a call was refused.
pub enum CallError {
    #[error("{0}")]
    /// No such record or collection.
    NotFound(String),
    #[error("{0}")]
    /// The body was wrong; the message names what.
    Invalid(String),
}

/// One call, as the audit keeps it.
#[derive(Debug, Clone, Serialize)]
pub struct AuditEntry {
    /// Its place in the audit.
    pub seq: u64,
    /// The HTTP method.
    pub method: String,
    /// The path.
    pub path: String,
    /// The query parameters.
    pub query: BTreeMap<String, String>,
    /// The request body.
    pub body: Value,
    /// The status answered.
    pub status: u16,
    /// What was answered.
    pub result: Value,
    /// An injected fault, when the call got one instead of its answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub injected: Option<String>,
}

#[derive(Debug, Clone, Default)]
/// Every service's collections and audit, from the task's fixtures.
pub struct Store {
    fixture: Value,
    data: BTreeMap<String, BTreeMap<String, Vec<Value>>>,
    audit: BTreeMap<String, Vec<AuditEntry>>,
    next_id: u64,
    seq: u64,
}

/// What the fixture holds for a service's collection: `{"mail": {"messages": [...]}}`, or for a
/// one-collection service its list directly (`{"contacts": [...]}`).
fn fixture_items(fixture: &Value, service: &str, collection: &str, only: bool) -> Result<Vec<Value>, String> {
    let Some(svc) = fixture.get(service) else { return Ok(Vec::new()) };
    let items = match svc {
        Value::Array(items) if only => items.clone(),
        Value::Object(o) => match o.get(collection) {
            Some(Value::Array(items)) => items.clone(),
            Some(other) => return Err(format!("{service}.{collection}: expected a list, got {other}")),
            None => Vec::new(),
        },
        other => return Err(format!("{service}: expected an object of collections, got {other}")),
    };
    for (i, item) in items.iter().enumerate() {
        if !item.is_object() {
            return Err(format!("{service}.{collection}[{i}]: expected an object"));
        }
    }
    Ok(items)
}

impl Store {
    /// The state a fixture describes; the error names the part that is wrong.
    pub fn from_fixture(fixture: Value) -> Result<Store, String> {
        if !fixture.is_object() {
            return Err("the fixture must be a JSON object of services".into());
        }
        if let Some(unknown) =
            fixture.as_object().into_iter().flatten().map(|(k, _)| k).find(|k| !SERVICES.iter().any(|(s, _)| s == k))
        {
            let known: Vec<&str> = SERVICES.iter().map(|(s, _)| *s).collect();
            return Err(format!("unknown service {unknown:?} in the fixture (known: {})", known.join(", ")));
        }
        let mut store = Store { fixture, ..Default::default() };
        store.reset_all()?;
        Ok(store)
    }

    fn reset_all(&mut self) -> Result<(), String> {
        for (svc, _) in SERVICES {
            self.reset(svc)?;
        }
        Ok(())
    }

    /// Back to the fixture, audit emptied.
    pub fn reset(&mut self, service: &str) -> Result<(), String> {
        let collections =
            SERVICES.iter().find(|(s, _)| *s == service).ok_or_else(|| format!("no service {service:?}"))?.1;
        let mut data = BTreeMap::new();
        for c in collections {
            let mut items = fixture_items(&self.fixture, service, c, collections.len() == 1)?;
            for item in &mut items {
                if item.get("id").is_none() {
                    self.next_id += 1;
                    item["id"] = json!(format!("{}-{}", c.trim_end_matches('s'), self.next_id));
                }
            }
            data.insert(c.to_string(), items);
        }
        self.data.insert(service.to_string(), data);
        self.audit.insert(service.to_string(), Vec::new());
        Ok(())
    }

    /// Every call the agent made to `service`, in order.
    pub fn audit(&self, service: &str) -> Vec<AuditEntry> {
        self.audit.get(service).cloned().unwrap_or_default()
    }

    /// Records one call of the agent.
    pub fn record(&mut self, service: &str, mut entry: AuditEntry) {
        self.seq += 1;
        entry.seq = self.seq;
        self.audit.entry(service.to_string()).or_default().push(entry);
    }

    fn collection(&mut self, service: &str, collection: &str) -> Result<&mut Vec<Value>, CallError> {
        self.data
            .get_mut(service)
            .and_then(|d| d.get_mut(collection))
            .ok_or_else(|| CallError::NotFound(format!("no collection {collection:?} in {service}")))
    }

    /// Items matching `q` (case-insensitive, in any string field) and every exact `field=value`.
    pub fn list(
        &mut self,
        service: &str,
        collection: &str,
        query: &BTreeMap<String, String>,
    ) -> Result<Value, CallError> {
        let items = self.collection(service, collection)?;
        let q = query.get("q").map(|q| q.to_lowercase());
        let matches = |item: &Value| {
            let text_hit = q.as_ref().is_none_or(|q| strings(item).iter().any(|s| s.to_lowercase().contains(q)));
            let fields_hit =
                query.iter().filter(|(k, _)| !matches!(k.as_str(), "q" | "limit")).all(|(k, v)| match &item[k] {
                    Value::String(s) => s == v,
                    Value::Array(a) => a.iter().any(|x| x.as_str() == Some(v)),
                    Value::Null => false,
                    other => serde_json::from_str::<Value>(v).ok().as_ref() == Some(other),
                });
            text_hit && fields_hit
        };
        let limit = query.get("limit").and_then(|l| l.parse().ok()).unwrap_or(usize::MAX);
        let found: Vec<Value> = items.iter().filter(|i| matches(i)).take(limit).cloned().collect();
        Ok(json!({ collection: found }))
    }

    /// One record.
    pub fn get(&mut self, service: &str, collection: &str, id: &str) -> Result<Value, CallError> {
        self.collection(service, collection)?
            .iter()
            .find(|i| i["id"] == id)
            .cloned()
            .ok_or_else(|| CallError::NotFound(format!("no {} {id:?} in {service}", collection.trim_end_matches('s'))))
    }

    /// Adds a record; answers it with its id.
    pub fn create(&mut self, service: &str, collection: &str, body: Value) -> Result<Value, CallError> {
        let Value::Object(mut fields) = body else {
            return Err(CallError::Invalid("the body must be a JSON object".into()));
        };
        self.next_id += 1;
        let id = format!("{}-{}", collection.trim_end_matches('s'), self.next_id);
        fields.entry("id").or_insert(json!(id));
        let item = Value::Object(fields);
        let items = self.collection(service, collection)?;
        if items.iter().any(|i| i["id"] == item["id"]) {
            return Err(CallError::Invalid(format!("id {} is taken", item["id"])));
        }
        items.push(item.clone());
        Ok(item)
    }

    /// Changes a record's fields.
    pub fn update(&mut self, service: &str, collection: &str, id: &str, body: Value) -> Result<Value, CallError> {
        let Value::Object(fields) = body else {
            return Err(CallError::Invalid("the body must be a JSON object".into()));
        };
        let items = self.collection(service, collection)?;
        let item = items.iter_mut().find(|i| i["id"] == id).ok_or_else(|| {
            CallError::NotFound(format!("no {} {id:?} in {service}", collection.trim_end_matches('s')))
        })?;
        let obj: &mut Map<String, Value> = item.as_object_mut().expect("items are objects");
        for (k, v) in fields {
            if k != "id" {
                obj.insert(k, v);
            }
        }
        Ok(item.clone())
    }

    /// Removes a record; answers what it was.
    pub fn delete(&mut self, service: &str, collection: &str, id: &str) -> Result<Value, CallError> {
        let items = self.collection(service, collection)?;
        let at = items.iter().position(|i| i["id"] == id).ok_or_else(|| {
            CallError::NotFound(format!("no {} {id:?} in {service}", collection.trim_end_matches('s')))
        })?;
        Ok(items.remove(at))
    }
}

/// Every string in a record, nested ones too.
fn strings(v: &Value) -> Vec<&str> {
    match v {
        Value::String(s) => vec![s],
        Value::Array(a) => a.iter().flat_map(strings).collect(),
        Value::Object(o) => o.values().flat_map(strings).collect(),
        _ => vec![],
    }
}
