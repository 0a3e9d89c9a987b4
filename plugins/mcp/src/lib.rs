//! The `mcp` tool adapter: the MCP servers a task declares in `[[environment.mcp_servers]]`
//! (handed over as this adapter's configuration, `{"servers": [...]}`), their tools offered to
//! the harness as `SERVER__TOOL`.
//!
//! Every exchange runs inside the sandbox, so the sandbox's limits and network policy apply:
//! - `stdio`: the server's command is started for each call with the whole exchange
//!   (`initialize`, `notifications/initialized`, the request) on its stdin, and answers on its
//!   stdout; a server that keeps state between calls is not supported this way;
//! - `streamable-http`: `curl` in the sandbox posts the exchange to the server's URL, keeping its
//!   `Mcp-Session-Id`; answers may be JSON or server-sent events.
//!
//! The legacy `sse` transport is refused, naming the server.

wit_bindgen::generate!({ path: "../../wit/0.2.0", world: "tool-adapter" });

mod protocol;

use exports::orchard::plugin::tools::Guest;
use orchard::plugin::types::{ContentPart, Error, ToolCall, ToolOutput, ToolSpec};
use serde_json::{Value, json};

use protocol::{Server, servers};

struct Mcp;

/// Between a server's name and its tool's in the names the harness sees.
const SEPARATOR: &str = "__";

impl Guest for Mcp {
    fn list() -> Vec<ToolSpec> {
        let mut specs = Vec::new();
        for server in servers() {
            match server.request("tools/list", json!({})) {
                Ok(result) => {
                    for tool in result["tools"].as_array().into_iter().flatten() {
                        let name = tool["name"].as_str().unwrap_or_default();
                        specs.push(ToolSpec {
                            name: format!("{}{SEPARATOR}{name}", server.name),
                            description: format!(
                                "[{} MCP server] {}",
                                server.name,
                                tool["description"].as_str().unwrap_or_default()
                            ),
                            parameters: tool
                                .get("inputSchema")
                                .cloned()
                                .unwrap_or_else(|| json!({"type": "object"}))
                                .to_string(),
                        });
                    }
                }
                // A server that cannot list its tools offers none; the log says why.
                Err(e) => orchard::plugin::log::event(
                    orchard::plugin::log::Level::Warn,
                    "mcp-list-failed",
                    &json!({"server": server.name, "error": format!("{e:?}")}).to_string(),
                ),
            }
        }
        specs
    }

    fn call(call: ToolCall) -> Result<ToolOutput, Error> {
        let (server_name, tool) = call
            .name
            .split_once(SEPARATOR)
            .ok_or_else(|| Error::NotFound(format!("{}: not an MCP tool (SERVER{SEPARATOR}TOOL)", call.name)))?;
        let servers = servers();
        let server: &Server = servers
            .iter()
            .find(|s| s.name == server_name)
            .ok_or_else(|| Error::NotFound(format!("{}: no MCP server named {server_name}", call.name)))?;
        let arguments: Value = serde_json::from_str(&call.arguments)
            .map_err(|e| Error::InvalidInput(format!("{}: arguments are not JSON: {e}", call.name)))?;
        let result = server.request("tools/call", json!({"name": tool, "arguments": arguments}))?;
        let mut content = Vec::new();
        for part in result["content"].as_array().into_iter().flatten() {
            match part["type"].as_str() {
                Some("text") => content.push(ContentPart::Text(part["text"].as_str().unwrap_or_default().into())),
                Some(other) => content.push(ContentPart::Text(format!("[{other} content: {}]", part))),
                None => {}
            }
        }
        if content.is_empty()
            && let Some(structured) = result.get("structuredContent")
        {
            content.push(ContentPart::Text(structured.to_string()));
        }
        Ok(ToolOutput { content, is_error: result["isError"].as_bool().unwrap_or(false) })
    }
}

export!(Mcp);
