//! Claw-Eval (a user's own checkout) into Harbor task folders over `orchard-mock-services`.
//!
//! Each `tasks/<id>/task.yaml` becomes a folder with the prompt as `instruction.md`, the task's
//! fixtures converted into one mock-services fixture, its own tools (names, descriptions and
//! input schemas kept, so the model sees Claw-Eval's tools) routed by the `assistant` adapter
//! to the equivalent mock-services route, and a `rubric` from its declared scoring components
//! and safety checks, Claw-Eval's score (safety × (0.8 completion + 0.2 robustness), pass at
//! 0.75) being the rubric's own.
//!
//! A task is skipped, with the reason, when its Python grader does more than its YAML declares
//! (a `grader.py` with code or constants of its own, or one that loads another task's), when it
//! needs the live web or media, when it uses a service or an endpoint the mock services do not
//! serve, or a check the rubric does not express. Nothing of Claw-Eval ships with Orchard: this
//! reads the user's copy.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value, json};

use crate::{ConvertError, Report};

/// Claw-Eval's services that `orchard-mock-services` stands in for: (theirs, ours).
const SERVICES: &[(&str, &str)] = &[
    ("gmail", "mail"),
    ("calendar", "calendar"),
    ("contacts", "contacts"),
    ("todo", "todo"),
    ("notes", "docs"),
    ("crm", "crm"),
    ("helpdesk", "helpdesk"),
];

/// An endpoint of theirs as a request to ours: (their path, method, our route, renames, drops,
/// fixed fields). Their requests are all `POST` with a JSON body; the route's `{name}`
/// placeholders take the argument of that name.
struct Route {
    theirs: &'static str,
    method: &'static str,
    ours: &'static str,
    rename: &'static [(&'static str, &'static str)],
    drop: &'static [&'static str],
    fixed: &'static [(&'static str, &'static str)],
}

const fn route(theirs: &'static str, method: &'static str, ours: &'static str) -> Route {
    Route { theirs, method, ours, rename: &[], drop: &[], fixed: &[] }
}

const ROUTES: &[Route] = &[
    Route {
        rename: &[("max_results", "limit")],
        drop: &["days_back"],
        ..route("/gmail/messages", "GET", "/mail/messages")
    },
    route("/gmail/messages/get", "GET", "/mail/messages/{message_id}"),
    route("/gmail/send", "POST", "/mail/send"),
    Route { rename: &[("reply_to_message_id", "in_reply_to")], ..route("/gmail/drafts/save", "POST", "/mail/drafts") },
    Route { rename: &[("query", "q")], ..route("/calendar/events", "GET", "/calendar/events") },
    route("/calendar/events/get", "GET", "/calendar/events/{event_id}"),
    route("/calendar/events/create", "POST", "/calendar/events"),
    route("/calendar/events/delete", "DELETE", "/calendar/events/{event_id}"),
    Route { rename: &[("query", "q")], ..route("/contacts/search", "GET", "/contacts/contacts") },
    route("/contacts/get", "GET", "/contacts/contacts/{contact_id}"),
    route("/todo/tasks", "GET", "/todo/tasks"),
    route("/todo/tasks/get", "GET", "/todo/tasks/{task_id}"),
    route("/todo/tasks/create", "POST", "/todo/tasks"),
    route("/todo/tasks/update", "PATCH", "/todo/tasks/{task_id}"),
    route("/todo/tasks/delete", "DELETE", "/todo/tasks/{task_id}"),
    route("/notes/list", "GET", "/docs/docs"),
    route("/notes/get", "GET", "/docs/docs/{note_id}"),
    route("/crm/customers", "GET", "/crm/accounts"),
    route("/crm/customers/get", "GET", "/crm/accounts/{customer_id}"),
    route("/helpdesk/tickets", "GET", "/helpdesk/tickets"),
    route("/helpdesk/tickets/get", "GET", "/helpdesk/tickets/{ticket_id}"),
    route("/helpdesk/tickets/update", "PATCH", "/helpdesk/tickets/{ticket_id}"),
    Route {
        fixed: &[("status", "closed")],
        ..route("/helpdesk/tickets/close", "PATCH", "/helpdesk/tickets/{ticket_id}")
    },
];

/// Their collections in our fixture: (our service, our collection, their record id field).
fn collection_of(service: &str) -> (&'static str, &'static str) {
    match service {
        "mail" => ("messages", "message_id"),
        "calendar" => ("events", "event_id"),
        "contacts" => ("contacts", "contact_id"),
        "todo" => ("tasks", "task_id"),
        "docs" => ("docs", "note_id"),
        "crm" => ("accounts", "customer_id"),
        _ => ("tickets", "ticket_id"),
    }
}

const PORT: u16 = 8900;

/// Converts every task of `checkout/tasks` into `out`. With `declared_only`, a task whose
/// `grader.py` does more than its YAML is converted anyway, graded on what the YAML declares
/// alone (the difference recorded in `metadata.claw_eval.grader_differs`): scores are then not
/// Claw-Eval's.
pub fn convert(checkout: &Path, out: &Path, declared_only: bool) -> Result<Report, ConvertError> {
    let tasks_dir = checkout.join("tasks");
    if !tasks_dir.is_dir() {
        return Err(ConvertError::Input {
            path: checkout.display().to_string(),
            reason: "no tasks/ folder: is this a Claw-Eval checkout?".into(),
        });
    }
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| ConvertError::Io { path, source }
    };
    let mut entries: Vec<_> = std::fs::read_dir(&tasks_dir)
        .map_err(io(&tasks_dir))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("task.yaml").is_file())
        .collect();
    if entries.is_empty() {
        return Err(ConvertError::Input {
            path: tasks_dir.display().to_string(),
            reason: "no tasks/<id>/task.yaml here: is this a Claw-Eval checkout?".into(),
        });
    }
    entries.sort();
    let mut report = Report::default();
    for dir in entries {
        let id = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        match convert_task(checkout, &dir, declared_only) {
            Ok(task) => {
                let target = out.join(&id);
                if target.exists() {
                    std::fs::remove_dir_all(&target).map_err(io(&target))?;
                }
                task.write(&target).map_err(io(&target))?;
                report.converted.push(id);
            }
            Err(reason) => report.skipped.push((id, reason)),
        }
    }
    std::fs::create_dir_all(out).map_err(io(out))?;
    let skipped: Vec<Value> = report.skipped.iter().map(|(id, why)| json!({"task": id, "reason": why})).collect();
    std::fs::write(out.join("skipped.json"), serde_json::to_string_pretty(&skipped).unwrap_or_default())
        .map_err(io(&out.join("skipped.json")))?;
    Ok(report)
}

struct Converted {
    instruction: String,
    fixture: Value,
    toml: String,
}

impl Converted {
    fn write(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir.join("environment"))?;
        std::fs::write(dir.join("instruction.md"), &self.instruction)?;
        std::fs::write(dir.join("environment/fixture.json"), serde_json::to_string_pretty(&self.fixture)?)?;
        std::fs::write(
            dir.join("environment/Dockerfile"),
            "# Converted from Claw-Eval: the mock services (in every sandbox at /.orchard/bin) serve the\n\
             # task's fixtures on the sandbox's loopback, and delete them once loaded.\n\
             FROM debian:bookworm-slim\n\
             COPY fixture.json /opt/orchard/fixture.json\n\
             CMD [\"/.orchard/bin/orchard-mock-services\", \"--fixture\", \"/opt/orchard/fixture.json\", \"--forget-fixture\"]\n\
             HEALTHCHECK --interval=1s CMD curl -sf http://127.0.0.1:8900/\n",
        )?;
        std::fs::write(dir.join("task.toml"), &self.toml)
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Why a `grader.py` does more than the YAML declares, if it does.
fn grader_does_more(text: &str) -> Option<String> {
    if text.contains("load_peer_grader") {
        return Some("grader.py builds on another task's grader (load_peer_grader)".into());
    }
    if let Some(line) = text.lines().find(|l| l.trim_start().starts_with("def ")) {
        return Some(format!("grader.py scores with code of its own ({})", line.trim().trim_end_matches(':')));
    }
    let constant = text.lines().find(|l| {
        let t = l.trim_start();
        l.starts_with(char::is_whitespace)
            && t.split('=').next().is_some_and(|n| {
                let n = n.trim();
                !n.is_empty()
                    && n.chars().all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
                    && t.contains('=')
            })
    });
    constant.map(|l| {
        format!("grader.py holds expected values of its own ({})", l.trim().chars().take(60).collect::<String>())
    })
}

fn convert_task(checkout: &Path, dir: &Path, declared_only: bool) -> Result<Converted, String> {
    let text = std::fs::read_to_string(dir.join("task.yaml")).map_err(|e| format!("task.yaml: {e}"))?;
    let yaml: Value = serde_yaml::from_str(&text).map_err(|e| format!("task.yaml: {e}"))?;
    let differs = std::fs::read_to_string(dir.join("grader.py")).ok().and_then(|g| grader_does_more(&g));
    if let (Some(why), false) = (&differs, declared_only) {
        return Err(why.clone());
    }
    let prompt = &yaml["prompt"];
    if prompt["attachments"].as_array().is_some_and(|a| !a.is_empty()) {
        return Err("needs media: the prompt has attachments".into());
    }
    // Services: each must be one the mock services stand in for.
    let mut ours: Vec<(&str, &str)> = Vec::new();
    for s in yaml["services"].as_array().into_iter().flatten() {
        let name = str_of(s, "name");
        if name.starts_with("web") || name == "rss" {
            return Err(format!("needs the live web (service {name:?})"));
        }
        match SERVICES.iter().find(|(theirs, _)| *theirs == name) {
            Some(pair) => ours.push(*pair),
            None => {
                let known: Vec<&str> = SERVICES.iter().map(|(t, _)| *t).collect();
                return Err(format!(
                    "service {name:?} is not among those orchard-mock-services stands in for ({})",
                    known.join(", ")
                ));
            }
        }
    }
    if ours.is_empty() {
        return Err("uses no fixture service (a sandbox or web task, not an assistant one)".into());
    }
    let tools = tools(&yaml)?;
    let checks = checks(&yaml)?;
    let fixture = fixture(checkout, dir, &yaml, &ours)?;
    let instruction = str_of(prompt, "text").trim().to_string();
    if instruction.is_empty() {
        return Err("prompt.text is empty".into());
    }
    let mut metadata = Map::new();
    metadata.insert("category".into(), json!("assistant"));
    metadata.insert("domain".into(), json!("claw-eval"));
    metadata.insert(
        "claw_eval".into(),
        json!({"task_id": yaml["task_id"], "task_name": yaml["task_name"], "category": yaml["category"],
               "difficulty": yaml["difficulty"], "reference_solution": yaml["reference_solution"],
               "grader_differs": differs}),
    );
    metadata.insert("tool_config".into(), json!({"assistant": {"tools": tools}}));
    metadata.insert("rubric".into(), json!({"checks": checks}));
    let timeout = yaml["environment"]["timeout_seconds"].as_u64().unwrap_or(300);
    let mut doc = json!({
        "version": "1.0",
        "agent": {"timeout_sec": timeout, "tools": ["assistant"]},
        "verifier": {"timeout_sec": 120, "grader": "rubric"},
        "metadata": Value::Object(metadata),
    });
    // TOML has no null: what Claw-Eval leaves unset is left out.
    drop_nulls(&mut doc);
    let toml = toml::to_string(&doc).map_err(|e| format!("writing task.toml: {e}"))?;
    Ok(Converted { instruction: instruction + "\n", fixture, toml })
}

fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(drop_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// The task's fixture files, each service's records under our service and collection, with
/// `id` set from Claw-Eval's own id field.
fn fixture(checkout: &Path, dir: &Path, yaml: &Value, services: &[(&str, &str)]) -> Result<Value, String> {
    let mut out = Map::new();
    for (theirs, ours) in services {
        let service = yaml["services"].as_array().into_iter().flatten().find(|s| str_of(s, "name") == *theirs);
        // The file the service is pointed at (`env`), else the task's fixtures/<service>/.
        let mut files: Vec<std::path::PathBuf> = service
            .and_then(|s| s["env"].as_object())
            .into_iter()
            .flatten()
            .filter_map(|(_, v)| v.as_str().filter(|p| p.ends_with(".json")).map(|p| checkout.join(p)))
            .collect();
        if files.is_empty() {
            let folder = dir.join("fixtures").join(theirs);
            files = std::fs::read_dir(&folder)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect();
            files.sort();
        }
        let (collection, id_field) = collection_of(ours);
        let mut records = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).map_err(|e| format!("fixture {}: {e}", file.display()))?;
            let v: Value = serde_json::from_str(&text).map_err(|e| format!("fixture {}: {e}", file.display()))?;
            let items = match v {
                Value::Array(items) => items,
                Value::Object(m) => m.into_iter().find_map(|(_, v)| v.as_array().cloned()).unwrap_or_default(),
                _ => vec![],
            };
            for mut item in items {
                if item.get("id").is_none()
                    && let Some(id) = item.get(id_field).cloned()
                {
                    item["id"] = id;
                }
                records.push(item);
            }
        }
        out.insert(ours.to_string(), json!({ collection: records }));
    }
    Ok(Value::Object(out))
}

/// Their tools, each routed to ours.
fn tools(yaml: &Value) -> Result<Vec<Value>, String> {
    let endpoints: BTreeMap<&str, &str> = yaml["tool_endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| (str_of(e, "tool_name"), str_of(e, "url")))
        .collect();
    let mut out = Vec::new();
    for t in yaml["tools"].as_array().into_iter().flatten() {
        let name = str_of(t, "name");
        let url = endpoints.get(name).ok_or_else(|| format!("tool {name:?} has no tool_endpoints entry"))?;
        let path = url.split_once("://").map_or(*url, |(_, rest)| rest.find('/').map_or("/", |i| &rest[i..]));
        let r = ROUTES
            .iter()
            .find(|r| r.theirs == path)
            .ok_or_else(|| format!("tool {name:?}: the endpoint {path} has no equivalent in orchard-mock-services"))?;
        let obj = |pairs: &[(&str, &str)]| -> Map<String, Value> {
            pairs.iter().map(|(k, v)| (k.to_string(), json!(v))).collect()
        };
        out.push(json!({
            "name": name, "description": str_of(t, "description"),
            "parameters": t.get("input_schema").cloned().unwrap_or(json!({"type": "object", "properties": {}})),
            "method": r.method, "port": PORT, "route": r.ours,
            "rename": obj(r.rename), "drop": r.drop, "fixed": obj(r.fixed),
        }));
    }
    if out.is_empty() {
        return Err("declares no tools".into());
    }
    Ok(out)
}

/// The rubric: scoring components as completion checks (their weights kept; a keyword list
/// becomes one check per keyword sharing the weight, which is the fraction found), safety
/// checks as safety checks.
fn checks(yaml: &Value) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for c in yaml["scoring_components"].as_array().into_iter().flatten() {
        let name = str_of(c, "name").to_string();
        let weight = c["weight"].as_f64().filter(|w| *w > 0.0).unwrap_or(1.0);
        let check = &c["check"];
        let kind = str_of(check, "type");
        match kind {
            "tool_called" => out.push(json!({"name": name, "weight": weight, "kind": "tool_called",
                "tool": str_of(check, "tool_name"), "min_calls": check["min_calls"].as_u64().unwrap_or(1)})),
            "tool_not_called" => out.push(
                json!({"name": name, "weight": weight, "kind": "tool_not_called", "tool": str_of(check, "tool_name")}),
            ),
            "categories_present" => {
                out.push(json!({"name": name, "weight": weight, "kind": "answer", "contains": check["categories"]}))
            }
            "keywords_present" => {
                let words: Vec<&Value> = check["keywords"].as_array().into_iter().flatten().collect();
                if words.is_empty() {
                    return Err(format!("scoring component {name:?}: keywords_present without keywords"));
                }
                for w in &words {
                    let word = w.as_str().map(str::to_string).unwrap_or_else(|| w.to_string());
                    out.push(json!({"name": format!("{name}: {word}"), "weight": weight / words.len() as f64, "kind": "answer", "contains": [word]}));
                }
            }
            "min_length" => out.push(json!({"name": name, "weight": weight, "kind": "answer",
                "min_length": check["min_length"].as_u64().unwrap_or(1)})),
            "llm_judge" => {
                let rubric = [
                    str_of(check, "rubric"),
                    str_of(check, "description"),
                    yaml["judge_rubric"].as_str().unwrap_or(""),
                ]
                .into_iter()
                .find(|r| !r.trim().is_empty())
                .ok_or_else(|| format!("scoring component {name:?}: llm_judge without a rubric"))?;
                let mut judge = json!({"name": name, "weight": weight, "kind": "judge", "rubric": rubric});
                if let Some(reference) = yaml["reference_solution"].as_str().filter(|r| !r.trim().is_empty()) {
                    judge["reference"] = json!(reference);
                }
                out.push(judge);
            }
            other => return Err(format!("scoring component {name:?}: a {other:?} check has no rubric equivalent")),
        }
    }
    for (i, s) in yaml["safety_checks"].as_array().into_iter().flatten().enumerate() {
        let name = Some(str_of(s, "description"))
            .filter(|d| !d.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| format!("safety {}", i + 1));
        match str_of(s, "type") {
            "tool_not_called" => out.push(
                json!({"name": name, "kind": "tool_not_called", "tool": str_of(s, "tool_name"), "category": "safety"}),
            ),
            other => return Err(format!("safety check {name:?}: a {other:?} check has no rubric equivalent")),
        }
    }
    if !out.iter().any(|c| c["category"] != "safety") {
        return Err("no scoring component the rubric can express".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graders_doing_more_than_the_yaml_are_named() {
        assert!(
            grader_does_more("from claw_eval.graders.base import BaseGrader\nclass G(BaseGrader):\n    pass\n")
                .is_none()
        );
        assert!(
            grader_does_more("class G(B):\n    def grade(self):\n        return 1\n")
                .unwrap()
                .contains("def grade(self)")
        );
        assert!(grader_does_more("_Base = load_peer_grader('T1')\n").unwrap().contains("another task"));
        assert!(grader_does_more("class G(B):\n    EXPECTED = {'a': 1}\n").unwrap().contains("EXPECTED"));
    }
}
