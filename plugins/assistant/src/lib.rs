//! The `assistant` tool adapter: the tools a task describes, each an HTTP request to a service
//! listening on the sandbox's own loopback (the assistant domain's mock services).
//!
//! Configuration (`[metadata.tool_config.assistant]` in task.toml, or `--tool-config`):
//! `services = ["mail", "calendar", ...]`, the standard tools of those mock services (see
//! `catalog`; on `port`, default 8900), and/or `tools = [{name, description, parameters (JSON
//! Schema), method, port, route}]`, or `tools_file` (a JSON file of that list inside the
//! sandbox). A `route` may hold `{param}`
//! placeholders, filled from the call's arguments; the other arguments go in the query string
//! (GET, DELETE) or as the JSON body (POST, PUT, PATCH). The service's JSON answer is the tool's
//! result; an HTTP error (4xx, 5xx, a service not answering) comes back as a tool error the model
//! can read and recover from — never as a failed call. No shell. A tool may also `rename`
//! arguments (`{"max_results": "limit"}`), `drop` some, and send `fixed` fields, so that a
//! converted benchmark keeps its own tool schemas over these services.

wit_bindgen::generate!({ path: "../../wit/0.2.0", world: "tool-adapter" });

pub mod catalog;

use std::sync::OnceLock;

use exports::orchard::plugin::tools::Guest;
use orchard::plugin::sandbox::{self, HttpRequest};
use orchard::plugin::types::{ContentPart, Error, ToolCall, ToolOutput, ToolSpec};
use serde_json::{Map, Value};

struct Assistant;

/// Answers longer than this are cut (with a note of how much was left out).
const MAX_ANSWER: usize = 16_000;

struct Tool {
    spec: ToolSpec,
    method: String,
    port: u16,
    route: String,
    /// Arguments renamed before the request (`{"max_results": "limit"}`): a task keeps another
    /// benchmark's tool schema while the request speaks the mock services' names.
    rename: Map<String, Value>,
    /// Arguments left out of the request.
    drop: Vec<String>,
    /// Fields always sent in the body (or query), e.g. `{"status": "closed"}` for a close tool.
    fixed: Map<String, Value>,
}

fn tools() -> &'static Result<Vec<Tool>, String> {
    static TOOLS: OnceLock<Result<Vec<Tool>, String>> = OnceLock::new();
    TOOLS.get_or_init(|| parse(&orchard::plugin::config::get()))
}

fn parse(config: &str) -> Result<Vec<Tool>, String> {
    let config: Value = serde_json::from_str(if config.trim().is_empty() { "{}" } else { config })
        .map_err(|e| format!("the configuration is not JSON: {e}"))?;
    let port = match config.get("port") {
        None => 8900,
        Some(p) => p.as_u64().and_then(|p| u16::try_from(p).ok()).ok_or("port: a port number")?,
    };
    let mut list = Vec::new();
    match config.get("services") {
        None => {}
        Some(Value::Array(names)) => {
            for name in names {
                let name = name.as_str().ok_or("services: a list of service names")?;
                list.extend(catalog::tools_of(name, port).ok_or_else(|| {
                    format!("services: no standard tools for {name:?} (known: {})", catalog::services().join(", "))
                })?);
            }
        }
        Some(_) => return Err("services: a list of service names".into()),
    }
    match (config.get("tools"), config.get("tools_file").and_then(Value::as_str)) {
        (Some(Value::Array(more)), _) => list.extend(more.iter().cloned()),
        (Some(_), _) => return Err("tools: expected a list".into()),
        (None, Some(path)) => {
            let bytes = sandbox::read_file(path).map_err(|e| format!("tools_file {path}: {e:?}"))?;
            list.extend(serde_json::from_slice::<Vec<Value>>(&bytes).map_err(|e| format!("tools_file {path}: {e}"))?);
        }
        (None, None) if list.is_empty() => {
            return Err("no tools: give `services`, `tools` or `tools_file` in the assistant's configuration".into());
        }
        (None, None) => {}
    }
    let mut out: Vec<Tool> = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let field =
            |k: &str| t.get(k).and_then(Value::as_str).map(str::to_string).ok_or(format!("tools[{i}].{k}: missing"));
        let name = field("name")?;
        if out.iter().any(|o| o.spec.name == name) {
            return Err(format!("tools[{i}].name: {name:?} twice"));
        }
        let method = field("method").unwrap_or_else(|_| "GET".into()).to_uppercase();
        if !["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&method.as_str()) {
            return Err(format!("tools[{i}].method: {method:?} is not an HTTP method"));
        }
        let port = t
            .get("port")
            .and_then(Value::as_u64)
            .and_then(|p| u16::try_from(p).ok())
            .ok_or(format!("tools[{i}].port: a port number"))?;
        let route = field("route")?;
        if !route.starts_with('/') {
            return Err(format!("tools[{i}].route: {route:?} must start with /"));
        }
        let parameters =
            t.get("parameters").cloned().unwrap_or(serde_json::json!({"type": "object", "properties": {}}));
        out.push(Tool {
            spec: ToolSpec {
                name,
                description: field("description").unwrap_or_default(),
                parameters: parameters.to_string(),
            },
            method,
            port,
            route,
            rename: t.get("rename").and_then(Value::as_object).cloned().unwrap_or_default(),
            drop: t
                .get("drop")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
                .unwrap_or_default(),
            fixed: t.get("fixed").and_then(Value::as_object).cloned().unwrap_or_default(),
        });
    }
    Ok(out)
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(scalar).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// The request a call makes: the route's placeholders filled, the rest as query or body.
fn request(tool: &Tool, given: Map<String, Value>) -> Result<HttpRequest, String> {
    let mut args = Map::new();
    for (k, v) in given {
        if tool.drop.contains(&k) {
            continue;
        }
        let name = tool.rename.get(&k).and_then(Value::as_str).map(str::to_string).unwrap_or(k);
        args.insert(name, v);
    }
    args.extend(tool.fixed.clone());
    let mut path = String::new();
    let mut rest = tool.route.as_str();
    while let Some(open) = rest.find('{') {
        let close = rest[open..].find('}').map(|c| open + c).ok_or(format!("route {}: an unclosed {{", tool.route))?;
        let name = &rest[open + 1..close];
        let value = args.remove(name).ok_or(format!("{name}: missing (the route needs it)"))?;
        path.push_str(&rest[..open]);
        path.push_str(&encode(&scalar(&value)));
        rest = &rest[close + 1..];
    }
    path.push_str(rest);
    let mut body = Vec::new();
    let mut headers = vec![("accept".to_string(), "application/json".to_string())];
    if matches!(tool.method.as_str(), "GET" | "DELETE") {
        let query: Vec<String> = args
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| format!("{}={}", encode(k), encode(&scalar(v))))
            .collect();
        if !query.is_empty() {
            path.push(if path.contains('?') { '&' } else { '?' });
            path.push_str(&query.join("&"));
        }
    } else {
        body = Value::Object(args).to_string().into_bytes();
        headers.push(("content-type".into(), "application/json".into()));
    }
    Ok(HttpRequest { method: tool.method.clone(), port: tool.port, path, headers, body, timeout_ms: Some(30_000) })
}

fn text(s: String, is_error: bool) -> Result<ToolOutput, Error> {
    let s = if s.len() > MAX_ANSWER {
        let mut end = MAX_ANSWER;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}\n[… {} more bytes left out]", &s[..end], s.len() - end)
    } else {
        s
    };
    Ok(ToolOutput { content: vec![ContentPart::Text(s)], is_error })
}

impl Guest for Assistant {
    fn list() -> Vec<ToolSpec> {
        match tools() {
            Ok(tools) => tools.iter().map(|t| t.spec.clone()).collect(),
            Err(e) => {
                orchard::plugin::log::event(orchard::plugin::log::Level::Error, "config", e);
                Vec::new()
            }
        }
    }

    fn call(call: ToolCall) -> Result<ToolOutput, Error> {
        let tools = tools().as_ref().map_err(|e| Error::InvalidInput(format!("the assistant's configuration: {e}")))?;
        let tool = tools
            .iter()
            .find(|t| t.spec.name == call.name)
            .ok_or_else(|| Error::NotFound(format!("no tool {:?}", call.name)))?;
        let args: Value = serde_json::from_str(if call.arguments.trim().is_empty() { "{}" } else { &call.arguments })
            .map_err(|e| Error::InvalidInput(format!("arguments: {e}")))?;
        let Value::Object(args) = args else {
            return Err(Error::InvalidInput("arguments: expected a JSON object".into()));
        };
        let req = match request(tool, args) {
            Ok(r) => r,
            Err(e) => return text(format!("error: {e}"), true),
        };
        match sandbox::http(&req) {
            Ok(resp) => {
                let body = String::from_utf8_lossy(&resp.body).into_owned();
                let shown = serde_json::from_str::<Value>(&body)
                    .map(|v| serde_json::to_string_pretty(&v).unwrap_or(body.clone()))
                    .unwrap_or(body);
                if resp.status >= 400 {
                    text(format!("error: HTTP {} from {}: {shown}", resp.status, req.path), true)
                } else {
                    text(shown, false)
                }
            }
            Err(e) => text(format!("error: the service on port {} did not answer: {e:?}", tool.port), true),
        }
    }
}

export!(Assistant);
