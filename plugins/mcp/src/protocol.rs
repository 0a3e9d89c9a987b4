//! One MCP exchange with a declared server, run inside the sandbox.

use serde_json::{Value, json};

use crate::orchard::plugin::sandbox::{self, Command, ExecRequest};
use crate::orchard::plugin::types::Error;

/// How long one exchange may take.
const TIMEOUT_MS: u64 = 120_000;

/// The protocol version this client speaks first.
const PROTOCOL_VERSION: &str = "2025-06-18";

/// A server the task declared.
pub struct Server {
    pub name: String,
    transport: Transport,
}

enum Transport {
    Stdio { command: String, args: Vec<String> },
    Http { url: String, headers: Vec<(String, String)> },
    Unsupported(String),
}

/// The servers of this adapter's configuration.
pub fn servers() -> Vec<Server> {
    let config: Value = serde_json::from_str(&crate::orchard::plugin::config::get()).unwrap_or(Value::Null);
    config["servers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let name = s["name"].as_str().unwrap_or_default().to_string();
            let transport = match s["transport"].as_str().unwrap_or("sse") {
                "stdio" => Transport::Stdio {
                    command: s["command"].as_str().unwrap_or_default().into(),
                    args: s["args"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|a| a.as_str().map(String::from))
                        .collect(),
                },
                "streamable-http" => Transport::Http {
                    url: s["url"].as_str().unwrap_or_default().into(),
                    headers: s["headers"]
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect(),
                },
                other => Transport::Unsupported(other.to_string()),
            };
            Server { name, transport }
        })
        .collect()
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
        "clientInfo": {"name": "orchard", "version": env!("CARGO_PKG_VERSION")}}})
}

const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// The JSON-RPC answer with `id` among `text`'s lines (plain JSON lines or `data:` events).
fn answer(text: &str, id: u64) -> Option<Value> {
    text.lines()
        .map(|l| l.trim().strip_prefix("data:").map(str::trim).unwrap_or(l.trim()))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["id"].as_u64() == Some(id))
}

/// `curl` in the sandbox: the exchange posted in order, the session id carried; prints the last
/// answer's body. Values arrive as environment variables: nothing is quoted into the script.
const HTTP_SCRIPT: &str = r#"set -e
h=$(mktemp)
args=(-sS --max-time 60 -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream')
for i in $(seq 1 "$MCP_HEADERS"); do v="MCP_HEADER_$i"; args+=(-H "${!v}"); done
curl "${args[@]}" -D "$h" --data "$MCP_INIT" "$MCP_URL" > /dev/null
sid=$(grep -i '^mcp-session-id:' "$h" | head -1 | cut -d: -f2- | tr -d ' \r')
if [ -n "$sid" ]; then args+=(-H "Mcp-Session-Id: $sid"); fi
curl "${args[@]}" --data "$MCP_INITIALIZED" "$MCP_URL" > /dev/null
curl "${args[@]}" --data "$MCP_REQUEST" "$MCP_URL"
rm -f "$h""#;

impl Server {
    /// Sends `method` with `params` (after the handshake); answers its `result`.
    pub fn request(&self, method: &str, params: Value) -> Result<Value, Error> {
        let request = json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params});
        let exec = match &self.transport {
            Transport::Stdio { command, args } if !command.is_empty() => {
                let stdin = format!("{}\n{INITIALIZED}\n{request}\n", initialize());
                ExecRequest {
                    command: Command::Argv(std::iter::once(command.clone()).chain(args.iter().cloned()).collect()),
                    cwd: None,
                    env: vec![],
                    timeout_ms: Some(TIMEOUT_MS),
                    stdin: Some(stdin.into_bytes()),
                }
            }
            Transport::Http { url, headers } if !url.is_empty() => {
                let mut env = vec![
                    ("MCP_URL".to_string(), url.clone()),
                    ("MCP_INIT".into(), initialize().to_string()),
                    ("MCP_INITIALIZED".into(), INITIALIZED.into()),
                    ("MCP_REQUEST".into(), request.to_string()),
                    ("MCP_HEADERS".into(), headers.len().to_string()),
                ];
                for (i, (k, v)) in headers.iter().enumerate() {
                    env.push((format!("MCP_HEADER_{}", i + 1), format!("{k}: {v}")));
                }
                ExecRequest {
                    command: Command::Argv(vec!["bash".into(), "-c".into(), HTTP_SCRIPT.into()]),
                    cwd: None,
                    env,
                    timeout_ms: Some(TIMEOUT_MS),
                    stdin: None,
                }
            }
            Transport::Unsupported(t) => {
                return Err(Error::Unavailable(format!(
                    "MCP server {}: transport {t:?} is not supported (use stdio or streamable-http)",
                    self.name
                )));
            }
            _ => return Err(Error::InvalidInput(format!("MCP server {}: no command or url", self.name))),
        };
        let ran = sandbox::exec(&exec)?;
        let Some(reply) = answer(&ran.stdout, 2) else {
            return Err(Error::Unavailable(format!(
                "MCP server {} gave no answer to {method} (exit {}): {}",
                self.name,
                ran.exit_code,
                ran.stderr.chars().take(500).collect::<String>()
            )));
        };
        if let Some(e) = reply.get("error") {
            return Err(Error::Other(format!("MCP server {}: {method}: {}", self.name, e)));
        }
        Ok(reply["result"].clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_found_in_lines_or_events() {
        let lines =
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"x\":1}}\n";
        assert_eq!(answer(lines, 2).unwrap()["result"]["x"], 1);
        let events = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"y\":2}}\n\n";
        assert_eq!(answer(events, 2).unwrap()["result"]["y"], 2);
        assert!(answer("nothing", 2).is_none());
    }
}
