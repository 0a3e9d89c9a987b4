//! The objects, their versions and the history watches replay from.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::sync::broadcast;

/// (resource path up to the namespace, e.g. `api/v1/pods`, namespace, name).
pub type Key = (String, String, String);

/// One change, as a watch sends it.
pub struct Change {
    pub version: u64,
    pub resource: String,
    pub namespace: String,
    /// The object as of the change (what label selectors match).
    pub object: Value,
    /// The encoded watch event line, `{"type":…,"object":…}\n`.
    pub line: bytes::Bytes,
    /// When it happened, for the injected watch delay.
    pub at: Instant,
}

/// Why a write was refused, as the API server's Status reason.
#[derive(Debug)]
pub enum Refused {
    NotFound,
    AlreadyExists,
    Conflict { have: String, wanted: String },
    Invalid(String),
}

/// Events kept for watches that start from an older version; older starts get 410.
const HISTORY: usize = 50_000;

pub struct Store {
    version: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Arc<Change>>,
    pub changes: broadcast::Sender<Arc<Change>>,
}

impl Store {
    pub fn new() -> Store {
        Store { version: 0, objects: BTreeMap::new(), history: VecDeque::new(), changes: broadcast::channel(HISTORY).0 }
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    pub fn get(&self, key: &Key) -> Option<&Value> {
        self.objects.get(key)
    }

    /// The objects of one resource in one namespace.
    pub fn list<'a>(&'a self, resource: &'a str, namespace: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        let start = (resource.to_string(), namespace.to_string(), String::new());
        self.objects.range(start..).take_while(move |((r, n, _), _)| r == resource && n == namespace).map(|(_, v)| v)
    }

    /// The objects of one resource in every namespace.
    pub fn all<'a>(&'a self, resource: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects.iter().filter(move |((r, _, _), _)| r == resource).map(|(_, v)| v)
    }

    pub fn create(&mut self, key: Key, mut object: Value) -> Result<Value, Refused> {
        if self.objects.contains_key(&key) {
            return Err(Refused::AlreadyExists);
        }
        let meta = object
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .ok_or(Refused::Invalid("metadata is required".into()))?;
        meta.insert("namespace".into(), json!(key.1));
        meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        meta.insert("creationTimestamp".into(), json!(rfc3339_now()));
        self.write(key, object, "ADDED")
    }

    /// Merges `patch` into the object (RFC 7386), into its `status` only when `status` is set,
    /// and into all but its `status` otherwise, as the subresource split works.
    pub fn patch(&mut self, key: Key, patch: &Value, status: bool) -> Result<Value, Refused> {
        let current = self.objects.get(&key).ok_or(Refused::NotFound)?;
        let have = current["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string();
        if let Some(wanted) = patch["metadata"]["resourceVersion"].as_str()
            && wanted != have
        {
            return Err(Refused::Conflict { have, wanted: wanted.to_string() });
        }
        if !status && key.0.ends_with("pods") {
            deadline_lowered_only(&current["spec"]["activeDeadlineSeconds"], &patch["spec"])?;
        }
        let mut object = current.clone();
        match (status, patch) {
            (true, _) => crate::merge::merge(&mut object["status"], &patch["status"]),
            (false, Value::Object(fields)) => {
                for (field, value) in fields.iter().filter(|(f, _)| f.as_str() != "status") {
                    crate::merge::merge(&mut object[field.as_str()], value);
                }
            }
            (false, _) => return Err(Refused::Invalid("a merge patch is a JSON object".into())),
        }
        self.write(key, object, "MODIFIED")
    }

    pub fn delete(&mut self, key: &Key) -> Result<Value, Refused> {
        let object = self.objects.remove(key).ok_or(Refused::NotFound)?;
        self.version += 1;
        self.record(key, &object, "DELETED");
        Ok(object)
    }

    fn write(&mut self, key: Key, mut object: Value, kind: &str) -> Result<Value, Refused> {
        self.version += 1;
        object["metadata"]["resourceVersion"] = json!(self.version.to_string());
        self.record(&key, &object, kind);
        self.objects.insert(key, object.clone());
        Ok(object)
    }

    fn record(&mut self, key: &Key, object: &Value, kind: &str) {
        let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).expect("JSON");
        line.push(b'\n');
        let change = Arc::new(Change {
            version: self.version,
            resource: key.0.clone(),
            namespace: key.1.clone(),
            object: object.clone(),
            line: line.into(),
            at: Instant::now(),
        });
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(change.clone());
        let _ = self.changes.send(change);
    }

    /// The changes after `version`, or `None` when the history no longer reaches back to it.
    pub fn since(&self, version: u64) -> Option<Vec<Arc<Change>>> {
        let oldest = self.history.front().map(|c| c.version).unwrap_or(self.version + 1);
        if version + 1 < oldest && version < self.version {
            return None;
        }
        Some(self.history.iter().filter(|c| c.version > version).cloned().collect())
    }
}

/// A pod's `activeDeadlineSeconds` may be set where it was not, or lowered; never raised or
/// removed (the API server's pod-update validation).
fn deadline_lowered_only(old: &Value, spec_patch: &Value) -> Result<(), Refused> {
    let (Some(old), Some(new)) = (old.as_i64(), spec_patch.get("activeDeadlineSeconds")) else { return Ok(()) };
    match new.as_i64() {
        None => Err(Refused::Invalid(
            "spec.activeDeadlineSeconds: Invalid value: null: must not update from a positive integer to nil value"
                .into(),
        )),
        Some(new) if new > old => Err(Refused::Invalid(format!(
            "spec.activeDeadlineSeconds: Invalid value: {new}: must be less than or equal to previous value"
        ))),
        Some(_) => Ok(()),
    }
}

/// Now as RFC 3339 in UTC, to the second, as `creationTimestamp` is written.
fn rfc3339_now() -> String {
    use k8s_openapi::chrono::{DateTime, SecondsFormat};
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    DateTime::from_timestamp(secs as i64, 0).unwrap_or_default().to_rfc3339_opts(SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_conflicts_and_history() {
        let mut store = Store::new();
        let key: Key = ("api/v1/pods".into(), "ns".into(), "a".into());
        let made = store.create(key.clone(), json!({"metadata": {"name": "a"}})).unwrap();
        assert_eq!(made["metadata"]["resourceVersion"], "1");
        assert!(matches!(store.create(key.clone(), json!({"metadata": {}})), Err(Refused::AlreadyExists)));
        let stale = json!({"metadata": {"resourceVersion": "0", "labels": {"x": "y"}}});
        assert!(matches!(store.patch(key.clone(), &stale, false), Err(Refused::Conflict { .. })));
        let fresh = json!({"metadata": {"resourceVersion": "1", "labels": {"x": "y"}}, "status": {"phase": "X"}});
        let patched = store.patch(key.clone(), &fresh, false).unwrap();
        assert_eq!((patched["metadata"]["labels"]["x"].as_str(), patched.get("status")), (Some("y"), None));
        let patched = store.patch(key.clone(), &json!({"status": {"phase": "Running"}}), true).unwrap();
        assert_eq!(patched["status"]["phase"], "Running");
        store.delete(&key).unwrap();
        let versions: Vec<u64> = store.since(1).unwrap().iter().map(|c| c.version).collect();
        assert_eq!(versions, [2, 3, 4]);
        // A pod's deadline only comes down.
        store.create(key.clone(), json!({"metadata": {"name": "a"}, "spec": {"activeDeadlineSeconds": 100}})).unwrap();
        for refused in [json!(101), Value::Null] {
            let raise = json!({"spec": {"activeDeadlineSeconds": refused}});
            assert!(matches!(store.patch(key.clone(), &raise, false), Err(Refused::Invalid(_))), "{raise}");
        }
        let lowered = store.patch(key.clone(), &json!({"spec": {"activeDeadlineSeconds": 60}}), false).unwrap();
        assert_eq!(lowered["spec"]["activeDeadlineSeconds"], 60);
        assert!(rfc3339_now().ends_with('Z') && rfc3339_now().len() == 20);
    }
}
