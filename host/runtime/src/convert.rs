//! Between the contract's types and the model client's (which are also the trajectory's).

/// The conversions for contract version `$v`. The host's tool router speaks 0.1.0's types;
/// `*_to_v1` / `*_from_v1` cross between a version's and those.
macro_rules! conversions {
    ($v:ident) => {
        #[allow(dead_code)] // not every conversion is needed in every version
        pub mod $v {
            use base64::Engine;
            use base64::engine::general_purpose::STANDARD as B64;
            use orchard_model as m;

            use crate::bindings::$v::harness::orchard::plugin::model::{FinishReason, Sampling};
            use crate::bindings::$v::tool_adapter::orchard::plugin::types::{
                ContentPart, Error as WitError, Image, Message, Outcome, Role, RunStatus, Task, ToolCall, ToolOutput,
                ToolSpec, Usage,
            };
            use crate::rollout::{RunOutcome, Status, TaskInput};

            /// The 0.1.0 types the router speaks.
            mod v1 {
                pub use crate::bindings::v0_1::tool_adapter::orchard::plugin::types::{
                    ContentPart, Error as WitError, Image, ToolCall, ToolOutput, ToolSpec,
                };
            }

            pub fn message_to_model(msg: &Message) -> m::Message {
                m::Message {
                    role: match msg.role {
                        Role::System => m::Role::System,
                        Role::User => m::Role::User,
                        Role::Assistant => m::Role::Assistant,
                        Role::Tool => m::Role::Tool,
                    },
                    content: parts_to_model(&msg.content),
                    tool_calls: msg.tool_calls.iter().map(call_to_model).collect(),
                    tool_call_id: msg.tool_call_id.clone(),
                    reasoning: msg.reasoning.clone(),
                }
            }

            pub fn parts_to_model(parts: &[ContentPart]) -> Vec<m::Part> {
                parts
                    .iter()
                    .map(|p| match p {
                        ContentPart::Text(t) => m::Part::Text { text: t.clone() },
                        ContentPart::Image(i) => {
                            m::Part::Image { media_type: i.media_type.clone(), data_base64: B64.encode(&i.data) }
                        }
                    })
                    .collect()
            }

            pub fn call_to_model(c: &ToolCall) -> m::ToolCall {
                m::ToolCall { id: c.id.clone(), name: c.name.clone(), arguments: c.arguments.clone() }
            }

            pub fn message_from_model(msg: &m::Message) -> Message {
                Message {
                    role: match msg.role {
                        m::Role::System => Role::System,
                        m::Role::User => Role::User,
                        m::Role::Assistant => Role::Assistant,
                        m::Role::Tool => Role::Tool,
                    },
                    content: msg
                        .content
                        .iter()
                        .map(|p| match p {
                            m::Part::Text { text } => ContentPart::Text(text.clone()),
                            m::Part::Image { media_type, data_base64 } => ContentPart::Image(Image {
                                media_type: media_type.clone(),
                                data: B64.decode(data_base64).unwrap_or_default(),
                            }),
                        })
                        .collect(),
                    tool_calls: msg
                        .tool_calls
                        .iter()
                        .map(|c| ToolCall { id: c.id.clone(), name: c.name.clone(), arguments: c.arguments.clone() })
                        .collect(),
                    tool_call_id: msg.tool_call_id.clone(),
                    reasoning: msg.reasoning.clone(),
                }
            }

            pub fn spec_to_model(s: &ToolSpec) -> m::ToolSpec {
                m::ToolSpec {
                    name: s.name.clone(),
                    description: s.description.clone(),
                    parameters: s.parameters.clone(),
                }
            }

            pub fn sampling_to_model(s: &Sampling) -> Result<m::Sampling, String> {
                let extra = match &s.extra {
                    Some(text) => {
                        let v: serde_json::Value =
                            serde_json::from_str(text).map_err(|e| format!("sampling.extra is not JSON: {e}"))?;
                        if !v.is_object() {
                            return Err("sampling.extra must be a JSON object".into());
                        }
                        Some(v)
                    }
                    None => None,
                };
                Ok(m::Sampling {
                    temperature: s.temperature,
                    top_p: s.top_p,
                    max_tokens: s.max_tokens,
                    stop: s.stop.clone(),
                    seed: s.seed,
                    extra,
                })
            }

            pub fn finish_from_model(f: m::FinishReason) -> FinishReason {
                match f {
                    m::FinishReason::Stop => FinishReason::Stop,
                    m::FinishReason::Length => FinishReason::Length,
                    m::FinishReason::ToolCalls => FinishReason::ToolCalls,
                    m::FinishReason::ContentFilter => FinishReason::ContentFilter,
                    m::FinishReason::Other => FinishReason::Other,
                }
            }

            pub fn usage_from_model(u: m::Usage) -> Usage {
                Usage {
                    prompt_tokens: u.prompt_tokens,
                    completion_tokens: u.completion_tokens,
                    total_tokens: u.total_tokens,
                }
            }

            pub fn task(t: &TaskInput) -> Task {
                Task { id: t.id.clone(), instruction: t.instruction.clone(), metadata: t.metadata.to_string() }
            }

            pub fn outcome_from(o: &Outcome) -> RunOutcome {
                RunOutcome {
                    status: match o.status {
                        RunStatus::Completed => Status::Completed,
                        RunStatus::LimitReached => Status::LimitReached,
                        RunStatus::FormatError => Status::FormatError,
                        RunStatus::GaveUp => Status::GaveUp,
                    },
                    answer: o.answer.clone(),
                    steps: o.steps,
                    message: o.message.clone(),
                }
            }

            pub fn outcome_to(r: &RunOutcome) -> Outcome {
                Outcome {
                    status: match r.status {
                        Status::Completed => RunStatus::Completed,
                        Status::LimitReached => RunStatus::LimitReached,
                        Status::FormatError => RunStatus::FormatError,
                        Status::GaveUp => RunStatus::GaveUp,
                    },
                    answer: r.answer.clone(),
                    steps: r.steps,
                    message: r.message.clone(),
                }
            }

            pub fn tool_spec_to_v1(s: ToolSpec) -> v1::ToolSpec {
                v1::ToolSpec { name: s.name, description: s.description, parameters: s.parameters }
            }

            pub fn tool_spec_from_v1(s: v1::ToolSpec) -> ToolSpec {
                ToolSpec { name: s.name, description: s.description, parameters: s.parameters }
            }

            pub fn tool_call_to_v1(c: ToolCall) -> v1::ToolCall {
                v1::ToolCall { id: c.id, name: c.name, arguments: c.arguments }
            }

            pub fn tool_call_from_v1(c: v1::ToolCall) -> ToolCall {
                ToolCall { id: c.id, name: c.name, arguments: c.arguments }
            }

            pub fn tool_output_to_v1(o: ToolOutput) -> v1::ToolOutput {
                v1::ToolOutput {
                    content: o
                        .content
                        .into_iter()
                        .map(|p| match p {
                            ContentPart::Text(t) => v1::ContentPart::Text(t),
                            ContentPart::Image(i) => {
                                v1::ContentPart::Image(v1::Image { media_type: i.media_type, data: i.data })
                            }
                        })
                        .collect(),
                    is_error: o.is_error,
                }
            }

            pub fn tool_output_from_v1(o: v1::ToolOutput) -> ToolOutput {
                ToolOutput {
                    content: o
                        .content
                        .into_iter()
                        .map(|p| match p {
                            v1::ContentPart::Text(t) => ContentPart::Text(t),
                            v1::ContentPart::Image(i) => {
                                ContentPart::Image(Image { media_type: i.media_type, data: i.data })
                            }
                        })
                        .collect(),
                    is_error: o.is_error,
                }
            }

            /// A plugin's error as people read it: `invalid input: …`, never the Debug form
            /// (`InvalidInput("…")`, its quotes escaped again at every layer).
            pub fn error_text(e: &WitError) -> String {
                let (kind, m) = match e {
                    WitError::InvalidInput(m) => ("invalid input", m),
                    WitError::NotFound(m) => ("not found", m),
                    WitError::Timeout(m) => ("timed out", m),
                    WitError::Denied(m) => ("denied", m),
                    WitError::Unavailable(m) => ("unavailable", m),
                    WitError::Other(m) => ("error", m),
                };
                format!("{kind}: {m}")
            }

            pub fn error_to_v1(e: WitError) -> v1::WitError {
                match e {
                    WitError::InvalidInput(m) => v1::WitError::InvalidInput(m),
                    WitError::NotFound(m) => v1::WitError::NotFound(m),
                    WitError::Timeout(m) => v1::WitError::Timeout(m),
                    WitError::Denied(m) => v1::WitError::Denied(m),
                    WitError::Unavailable(m) => v1::WitError::Unavailable(m),
                    WitError::Other(m) => v1::WitError::Other(m),
                }
            }
        }
    };
}

conversions!(v0_1);
conversions!(v0_2);

pub use v0_1::{call_to_model, parts_to_model};
