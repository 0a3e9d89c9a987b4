//! One module per contract version (`orchard:plugin@X.Y.Z`, `wit/X.Y.Z`), as Zed's extension host
//! keeps one per WIT version: each holds that version's generated bindings, its conversions to
//! the host's own types, which host interfaces it links (and what they do that an older version
//! did not), and how its worlds are instantiated and called. The rest of the runtime speaks only
//! `Pre` and `BoundTools`, dispatched here.
//!
//! Invariants:
//! - A frozen version's module never changes what its plugins see: a new version is a new file
//!   and one line in `versions!`, never an edit of an older one.
//! - The host's tool router speaks 0.1.0's types; every version converts at its edge.

/// The worlds of the contract in `$path`; `$harness_with` maps what a version's harness
/// imports beyond 0.1.0's (0.3.0: the sandbox) onto the tool adapter's bindings, so one host
/// implementation serves both; `desktop: yes` for a version with the desktop-driver world
/// (0.3.0 on).
macro_rules! worlds {
    ($path:literal $(, harness_with: { $($harness_with:tt)* })? $(, desktop: $desktop:ident)?) => {
        desktop_world!($path $(, $desktop)?);

        pub mod tool_adapter {
            wasmtime::component::bindgen!({
                path: $path,
                world: "tool-adapter",
                imports: { default: async },
                exports: { default: async },
            });
        }

        pub mod harness {
            wasmtime::component::bindgen!({
                path: $path,
                world: "harness",
                imports: { default: async },
                exports: { default: async },
                with: {
                    "orchard:plugin/types": super::tool_adapter::orchard::plugin::types,
                    "orchard:plugin/log": super::tool_adapter::orchard::plugin::log,
                    $($($harness_with)*)?
                },
            });
        }

        pub mod grader {
            wasmtime::component::bindgen!({
                path: $path,
                world: "grader",
                imports: { default: async },
                exports: { default: async },
                with: {
                    "orchard:plugin/types": super::tool_adapter::orchard::plugin::types,
                    "orchard:plugin/log": super::tool_adapter::orchard::plugin::log,
                    "orchard:plugin/sandbox": super::tool_adapter::orchard::plugin::sandbox,
                    "orchard:plugin/model": super::harness::orchard::plugin::model,
                },
            });
        }

        pub mod browser_driver {
            wasmtime::component::bindgen!({
                path: $path,
                world: "browser-driver",
                imports: { default: async | trappable },
                exports: { default: async },
                with: {
                    "orchard:plugin/types": super::tool_adapter::orchard::plugin::types,
                    "orchard:plugin/log": super::tool_adapter::orchard::plugin::log,
                    "orchard:plugin/sandbox": super::tool_adapter::orchard::plugin::sandbox,
                    "orchard:plugin/browser.session": crate::host::browser::Session,
                },
            });
        }
    };
}

/// A version's `desktop_driver` module: the desktop-driver world's bindings and the calls the
/// dispatch makes (`yes`), or, for a version without that world, the same calls on a type no
/// value has, so the dispatch is written once.
macro_rules! desktop_world {
    ($path:literal) => {
        /// This version has no desktop-driver world: a component cannot be one.
        pub mod desktop_driver {
            use crate::host::HostState;

            pub enum Pre {}
            pub enum Bound {}

            /// Nothing to link: no component of this version is a desktop driver (`pre` refuses).
            pub fn link(_: &mut wasmtime::component::Linker<HostState>) -> wasmtime::Result<()> {
                Ok(())
            }
            pub fn pre(_: wasmtime::component::InstancePre<HostState>) -> wasmtime::Result<Pre> {
                Err(wasmtime::Error::msg("the desktop-driver world is new in orchard:plugin@0.3.0"))
            }
            pub async fn instantiate(pre: &Pre, _: &mut wasmtime::Store<HostState>) -> wasmtime::Result<Bound> {
                match *pre {}
            }
            pub async fn list(
                bound: &Bound,
                _: &mut wasmtime::Store<HostState>,
            ) -> wasmtime::Result<Vec<super::tool_adapter::orchard::plugin::types::ToolSpec>> {
                match *bound {}
            }
            pub async fn call(
                bound: &Bound,
                _: &mut wasmtime::Store<HostState>,
                _: &super::tool_adapter::orchard::plugin::types::ToolCall,
            ) -> wasmtime::Result<
                Result<
                    super::tool_adapter::orchard::plugin::types::ToolOutput,
                    super::tool_adapter::orchard::plugin::types::Error,
                >,
            > {
                match *bound {}
            }
        }
    };
    ($path:literal, yes) => {
        pub mod desktop_driver {
            use wasmtime::component::HasSelf;

            use crate::host::HostState;

            wasmtime::component::bindgen!({
                path: $path,
                world: "desktop-driver",
                imports: { default: async },
                exports: { default: async },
                with: {
                    "orchard:plugin/types": super::tool_adapter::orchard::plugin::types,
                    "orchard:plugin/log": super::tool_adapter::orchard::plugin::log,
                    "orchard:plugin/sandbox": super::tool_adapter::orchard::plugin::sandbox,
                    "orchard:plugin/config": super::tool_adapter::orchard::plugin::config,
                },
            });

            pub type Pre = DesktopDriverPre<HostState>;
            pub type Bound = DesktopDriver;

            pub fn link(linker: &mut wasmtime::component::Linker<HostState>) -> wasmtime::Result<()> {
                DesktopDriver::add_to_linker::<_, HasSelf<_>>(linker, |s| s)
            }
            pub fn pre(pre: wasmtime::component::InstancePre<HostState>) -> wasmtime::Result<Pre> {
                DesktopDriverPre::new(pre)
            }
            pub async fn instantiate(pre: &Pre, store: &mut wasmtime::Store<HostState>) -> wasmtime::Result<Bound> {
                pre.instantiate_async(store).await
            }
            pub async fn list(
                bound: &Bound,
                store: &mut wasmtime::Store<HostState>,
            ) -> wasmtime::Result<Vec<super::tool_adapter::orchard::plugin::types::ToolSpec>> {
                bound.orchard_plugin_tools().call_list(store).await
            }
            pub async fn call(
                bound: &Bound,
                store: &mut wasmtime::Store<HostState>,
                call: &super::tool_adapter::orchard::plugin::types::ToolCall,
            ) -> wasmtime::Result<
                Result<
                    super::tool_adapter::orchard::plugin::types::ToolOutput,
                    super::tool_adapter::orchard::plugin::types::Error,
                >,
            > {
                bound.orchard_plugin_tools().call_call(store, call).await
            }
        }
    };
}

/// The conversions between version `$v`'s types and the model client's (which are also the
/// trajectory's). The host's tool router speaks 0.1.0's types; `*_to_v1` / `*_from_v1` cross
/// between a version's and those.
macro_rules! conversions {
    ($v:ident) => {
        #[allow(dead_code)] // not every conversion is needed in every version
        pub mod convert {
            use base64::Engine;
            use base64::engine::general_purpose::STANDARD as B64;
            use orchard_model as m;

            use crate::contract::$v::harness::orchard::plugin::model::{FinishReason, Sampling};
            use crate::contract::$v::tool_adapter::orchard::plugin::types::{
                ContentPart, Error as WitError, Image, Message, Outcome, Role, RunStatus, Task, ToolCall, ToolOutput,
                ToolSpec, Usage,
            };
            use crate::rollout::{RunOutcome, Status, TaskInput};

            /// The 0.1.0 types the router speaks.
            mod v1 {
                pub use crate::contract::v0_1::tool_adapter::orchard::plugin::types::{
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

/// What every version module provides, used by the dispatch below (one implementation per
/// version, the same signatures).
macro_rules! versions {
    ($($v:ident => $C:ident),* $(,)?) => {
        $(pub mod $v;)*

        /// A pre-instantiated component, by contract version (each version's own enum says the
        /// world).
        pub(crate) enum Pre {
            $(
                #[allow(missing_docs)]
                $C($v::Pre),
            )*
        }

        /// A tool adapter or browser driver instantiated for a rollout's tool router.
        pub(crate) enum BoundTools {
            $(
                #[allow(missing_docs)]
                $C($v::BoundTools),
            )*
        }

        /// Adds the imports of `kind`'s world in `contract` to `linker`.
        pub(crate) fn link(
            linker: &mut wasmtime::component::Linker<crate::host::HostState>,
            kind: crate::PluginKind,
            contract: crate::Contract,
        ) -> wasmtime::Result<()> {
            match contract {
                $(crate::Contract::$C => $v::link(linker, kind),)*
            }
        }

        impl Pre {
            /// Types a linked component as `kind`'s world of `contract`.
            pub(crate) fn new(
                kind: crate::PluginKind,
                contract: crate::Contract,
                pre: wasmtime::component::InstancePre<crate::host::HostState>,
            ) -> wasmtime::Result<Pre> {
                match contract {
                    $(crate::Contract::$C => $v::Pre::new(kind, pre).map(Pre::$C),)*
                }
            }

            /// Instantiates the component (and drops it): whether it starts at all.
            pub(crate) async fn instantiate(
                &self,
                store: &mut wasmtime::Store<crate::host::HostState>,
            ) -> wasmtime::Result<()> {
                match self {
                    $(Pre::$C(pre) => pre.instantiate(store).await,)*
                }
            }

            /// The world this component was typed as.
            pub(crate) fn kind(&self) -> crate::PluginKind {
                match self {
                    $(Pre::$C(pre) => pre.kind(),)*
                }
            }

            /// Instantiates a tool adapter or browser driver and lists its tools (`None` for
            /// the other worlds).
            pub(crate) async fn bind_tools(
                &self,
                store: &mut wasmtime::Store<crate::host::HostState>,
            ) -> Result<Option<(BoundTools, Vec<crate::contract::v0_1::ToolSpec>)>, (&'static str, wasmtime::Error)> {
                match self {
                    $(Pre::$C(pre) => Ok(pre.bind_tools(store).await?.map(|(b, s)| (BoundTools::$C(b), s))),)*
                }
            }

            /// Runs a harness (`None` for the other worlds): the outer error is the plugin
            /// failing, the inner one the harness's own error, as text.
            pub(crate) async fn run(
                &self,
                store: &mut wasmtime::Store<crate::host::HostState>,
                task: &crate::TaskInput,
                config: &str,
            ) -> Option<Result<Result<crate::RunOutcome, String>, (&'static str, wasmtime::Error)>> {
                match self {
                    $(Pre::$C(pre) => pre.run(store, task, config).await,)*
                }
            }

            /// Grades (`None` for the other worlds).
            pub(crate) async fn grade(
                &self,
                store: &mut wasmtime::Store<crate::host::HostState>,
                input: &GradeInput<'_>,
            ) -> Option<Result<Result<crate::Verdict, String>, (&'static str, wasmtime::Error)>> {
                match self {
                    $(Pre::$C(pre) => pre.grade(store, input).await,)*
                }
            }
        }

        impl BoundTools {
            /// Lists the tools again (what a benchmark of the host→guest call times).
            pub(crate) async fn list(&self, store: &mut wasmtime::Store<crate::host::HostState>) -> wasmtime::Result<()> {
                match self {
                    $(BoundTools::$C(b) => b.list(store).await,)*
                }
            }

            /// Calls a tool, in 0.1.0's types (the router's).
            pub(crate) async fn call(
                &self,
                store: &mut wasmtime::Store<crate::host::HostState>,
                call: &crate::contract::v0_1::ToolCall,
            ) -> wasmtime::Result<Result<crate::contract::v0_1::ToolOutput, crate::contract::v0_1::WitError>> {
                match self {
                    $(BoundTools::$C(b) => b.call(store, call).await,)*
                }
            }
        }
    };
}

/// What a grader is given, whatever its version.
pub(crate) struct GradeInput<'a> {
    pub task: &'a crate::TaskInput,
    pub outcome: &'a crate::RunOutcome,
    pub trajectory: &'a crate::Trajectory,
    pub duration_ms: u64,
    pub environment: &'a crate::GradingEnvironment,
}

/// The parts of a version module that are the same in every version but for the types: the
/// typed pre-instances, linking, instantiating, tools, running a harness and grading.
/// `$grading_env` names the version's function that builds `grading.grade`'s extra argument,
/// for versions whose grader is told its environment (0.2.0 on).
/// What every version from 0.2.0 on adds to the host side, in version `$v`'s types: browser
/// sessions' page events, the `config` import of tool adapters and browser drivers, and the
/// host's 0.1.0 errors converted to the version's.
macro_rules! since_v0_2 {
    ($v:ident) => {
        use wasmtime::component::Resource;

        use crate::host::browser::Session;

        browser_host!(
            $v,
            async fn events(
                &mut self,
                session: Resource<Session>,
            ) -> wasmtime::Result<Vec<browser_driver::orchard::plugin::browser::PageEvent>> {
                use browser_driver::orchard::plugin::browser::PageEvent as E;
                let events = self.browser_events(&session);
                Ok(events
                    .into_iter()
                    .map(|e| match e {
                        orchard_browser::PageEvent::Dialog(m) => E::Dialog(m),
                        orchard_browser::PageEvent::Popup(u) => E::Popup(u),
                        orchard_browser::PageEvent::Download(u) => E::Download(u),
                    })
                    .collect())
            }
        );

        impl tool_adapter::orchard::plugin::config::Host for HostState {
            async fn get(&mut self) -> String {
                self.config_json()
            }
        }

        impl browser_driver::orchard::plugin::config::Host for HostState {
            async fn get(&mut self) -> wasmtime::Result<String> {
                Ok(self.config_json())
            }
        }

        /// The host's own errors are made as 0.1.0 errors; a plugin of this version gets the same error.
        impl From<super::v0_1::WitError> for tool_adapter::orchard::plugin::types::Error {
            fn from(e: super::v0_1::WitError) -> Self {
                use super::v0_1::WitError as A;
                match e {
                    A::InvalidInput(m) => Self::InvalidInput(m),
                    A::NotFound(m) => Self::NotFound(m),
                    A::Timeout(m) => Self::Timeout(m),
                    A::Denied(m) => Self::Denied(m),
                    A::Unavailable(m) => Self::Unavailable(m),
                    A::Other(m) => Self::Other(m),
                }
            }
        }
    };
}

/// `grading_environment(env)` for a version whose grader is told its environment (0.2.0 on):
/// where the grader works and what was carried there, in that version's types.
macro_rules! grading_environment_fn {
    () => {
        fn grading_environment(
            env: &crate::GradingEnvironment,
        ) -> grader::exports::orchard::plugin::grading::Environment {
            use grader::exports::orchard::plugin::grading::{DroppedChange, Environment};
            Environment {
                separate: env.separate,
                base_commit: env.base_commit.clone(),
                carried: env.carried.clone(),
                dropped: env
                    .dropped
                    .iter()
                    .map(|(path, reason)| DroppedChange { path: path.clone(), reason: reason.clone() })
                    .collect(),
                artifacts: env.artifacts.clone(),
                problem: env.problem.clone(),
            }
        }
    };
}

macro_rules! common_calls {
    ($($grading_env:ident)?) => {
        use wasmtime::Store;
        use wasmtime::component::{HasSelf, InstancePre, Linker};

        use crate::PluginKind;
        use crate::host::HostState;

        /// A pre-instantiated component of this version, by world.
        pub(crate) enum Pre {
            Harness(harness::HarnessPre<HostState>),
            ToolAdapter(tool_adapter::ToolAdapterPre<HostState>),
            BrowserDriver(browser_driver::BrowserDriverPre<HostState>),
            DesktopDriver(desktop_driver::Pre),
            Grader(grader::GraderPre<HostState>),
        }

        /// A tool adapter or browser driver of this version, instantiated.
        pub(crate) enum BoundTools {
            Tools(tool_adapter::ToolAdapter),
            Browser(browser_driver::BrowserDriver),
            Desktop(desktop_driver::Bound),
        }

        pub(crate) fn link(linker: &mut Linker<HostState>, kind: PluginKind) -> wasmtime::Result<()> {
            match kind {
                PluginKind::Harness => harness::Harness::add_to_linker::<_, HasSelf<_>>(linker, |s| s),
                PluginKind::ToolAdapter => tool_adapter::ToolAdapter::add_to_linker::<_, HasSelf<_>>(linker, |s| s),
                PluginKind::BrowserDriver => {
                    browser_driver::BrowserDriver::add_to_linker::<_, HasSelf<_>>(linker, |s| s)
                }
                PluginKind::DesktopDriver => desktop_driver::link(linker),
                PluginKind::Grader => grader::Grader::add_to_linker::<_, HasSelf<_>>(linker, |s| s),
            }
        }

        impl Pre {
            pub(crate) fn new(kind: PluginKind, pre: InstancePre<HostState>) -> wasmtime::Result<Pre> {
                Ok(match kind {
                    PluginKind::Harness => Pre::Harness(harness::HarnessPre::new(pre)?),
                    PluginKind::ToolAdapter => Pre::ToolAdapter(tool_adapter::ToolAdapterPre::new(pre)?),
                    PluginKind::BrowserDriver => Pre::BrowserDriver(browser_driver::BrowserDriverPre::new(pre)?),
                    PluginKind::DesktopDriver => Pre::DesktopDriver(desktop_driver::pre(pre)?),
                    PluginKind::Grader => Pre::Grader(grader::GraderPre::new(pre)?),
                })
            }

            pub(crate) fn kind(&self) -> PluginKind {
                match self {
                    Pre::Harness(_) => PluginKind::Harness,
                    Pre::ToolAdapter(_) => PluginKind::ToolAdapter,
                    Pre::BrowserDriver(_) => PluginKind::BrowserDriver,
                    Pre::DesktopDriver(_) => PluginKind::DesktopDriver,
                    Pre::Grader(_) => PluginKind::Grader,
                }
            }

            pub(crate) async fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<()> {
                match self {
                    Pre::Harness(pre) => pre.instantiate_async(store).await.map(drop),
                    Pre::ToolAdapter(pre) => pre.instantiate_async(store).await.map(drop),
                    Pre::BrowserDriver(pre) => pre.instantiate_async(store).await.map(drop),
                    Pre::DesktopDriver(pre) => desktop_driver::instantiate(pre, store).await.map(drop),
                    Pre::Grader(pre) => pre.instantiate_async(store).await.map(drop),
                }
            }

            pub(crate) async fn bind_tools(
                &self,
                store: &mut Store<HostState>,
            ) -> Result<Option<(BoundTools, Vec<crate::contract::v0_1::ToolSpec>)>, (&'static str, wasmtime::Error)>
            {
                let bound = match self {
                    Pre::ToolAdapter(pre) => {
                        BoundTools::Tools(pre.instantiate_async(&mut *store).await.map_err(|e| ("instantiate", e))?)
                    }
                    Pre::BrowserDriver(pre) => {
                        BoundTools::Browser(pre.instantiate_async(&mut *store).await.map_err(|e| ("instantiate", e))?)
                    }
                    Pre::DesktopDriver(pre) => BoundTools::Desktop(
                        desktop_driver::instantiate(pre, &mut *store).await.map_err(|e| ("instantiate", e))?,
                    ),
                    _ => return Ok(None),
                };
                let specs = match &bound {
                    BoundTools::Tools(b) => b.orchard_plugin_tools().call_list(&mut *store).await,
                    BoundTools::Browser(b) => b.orchard_plugin_tools().call_list(&mut *store).await,
                    BoundTools::Desktop(b) => desktop_driver::list(b, &mut *store).await,
                }
                .map_err(|e| ("tools.list", e))?;
                Ok(Some((bound, specs.into_iter().map(convert::tool_spec_to_v1).collect())))
            }

            pub(crate) async fn run(
                &self,
                store: &mut Store<HostState>,
                task: &crate::TaskInput,
                config: &str,
            ) -> Option<Result<Result<crate::RunOutcome, String>, (&'static str, wasmtime::Error)>> {
                let Pre::Harness(pre) = self else { return None };
                Some(
                    async {
                        let bindings = pre.instantiate_async(&mut *store).await.map_err(|e| ("instantiate", e))?;
                        let task = convert::task(task);
                        let result = bindings
                            .orchard_plugin_agent()
                            .call_run(&mut *store, &task, config)
                            .await
                            .map_err(|e| ("agent.run", e))?;
                        Ok(result.map(|o| convert::outcome_from(&o)).map_err(|e| convert::error_text(&e)))
                    }
                    .await,
                )
            }

            pub(crate) async fn grade(
                &self,
                store: &mut Store<HostState>,
                input: &super::GradeInput<'_>,
            ) -> Option<Result<Result<crate::Verdict, String>, (&'static str, wasmtime::Error)>> {
                use grader::exports::orchard::plugin::grading;
                let Pre::Grader(pre) = self else { return None };
                Some(
                    async {
                        let bindings = pre.instantiate_async(&mut *store).await.map_err(|e| ("instantiate", e))?;
                        let result = bindings
                            .orchard_plugin_grading()
                            .call_grade(
                                &mut *store,
                                &convert::task(input.task),
                                &trajectory(input),
                                &convert::outcome_to(input.outcome),
                                $(&$grading_env(input.environment),)?
                            )
                            .await
                            .map_err(|e| ("grading.grade", e))?;
                        Ok(match result {
                            Ok(grading::Verdict::Graded(s)) => Ok(crate::Verdict::Graded {
                                reward: s.reward,
                                passed: s.passed,
                                sub_scores: s.sub_scores.into_iter().map(|s| (s.name, s.value)).collect(),
                                explanation: s.explanation,
                            }),
                            Ok(grading::Verdict::Unknown(reason)) => Ok(crate::Verdict::Unknown { reason }),
                            Err(e) => Err(convert::error_text(&e)),
                        })
                    }
                    .await,
                )
            }
        }

        impl BoundTools {
            pub(crate) async fn list(&self, store: &mut Store<HostState>) -> wasmtime::Result<()> {
                match self {
                    BoundTools::Tools(b) => b.orchard_plugin_tools().call_list(store).await.map(drop),
                    BoundTools::Browser(b) => b.orchard_plugin_tools().call_list(store).await.map(drop),
                    BoundTools::Desktop(b) => desktop_driver::list(b, store).await.map(drop),
                }
            }

            pub(crate) async fn call(
                &self,
                store: &mut Store<HostState>,
                call: &crate::contract::v0_1::ToolCall,
            ) -> wasmtime::Result<Result<crate::contract::v0_1::ToolOutput, crate::contract::v0_1::WitError>> {
                let call = convert::tool_call_from_v1(call.clone());
                let result = match self {
                    BoundTools::Tools(b) => b.orchard_plugin_tools().call_call(store, &call).await?,
                    BoundTools::Browser(b) => b.orchard_plugin_tools().call_call(store, &call).await?,
                    BoundTools::Desktop(b) => desktop_driver::call(b, store, &call).await?,
                };
                Ok(result.map(convert::tool_output_to_v1).map_err(convert::error_to_v1))
            }
        }

        /// The trajectory as this version's grader reads it.
        fn trajectory(input: &super::GradeInput<'_>) -> grader::exports::orchard::plugin::grading::Trajectory {
            grader::exports::orchard::plugin::grading::Trajectory {
                messages: input.trajectory.history().iter().map(convert::message_from_model).collect(),
                steps: input.trajectory.model_calls,
                usage: convert::usage_from_model(input.trajectory.usage),
                duration_ms: input.duration_ms,
            }
        }
    };
}

versions!(v0_1 => V0_1, v0_2 => V0_2, v0_3 => V0_3);
