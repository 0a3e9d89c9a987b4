//! Host bindings for the four worlds of `orchard:plugin@0.1.0`. Interfaces shared between worlds
//! are generated once (in `tool_adapter` or `harness`) and reused through `with`, so that one
//! `Host` implementation serves every world.

pub mod tool_adapter {
    wasmtime::component::bindgen!({
        path: "../../wit/0.1.0",
        world: "tool-adapter",
        imports: { default: async },
        exports: { default: async },
    });
}

pub mod harness {
    wasmtime::component::bindgen!({
        path: "../../wit/0.1.0",
        world: "harness",
        imports: { default: async },
        exports: { default: async },
        with: {
            "orchard:plugin/types": super::tool_adapter::orchard::plugin::types,
            "orchard:plugin/log": super::tool_adapter::orchard::plugin::log,
        },
    });
}

pub mod grader {
    wasmtime::component::bindgen!({
        path: "../../wit/0.1.0",
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
        path: "../../wit/0.1.0",
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

pub use tool_adapter::orchard::plugin::types::{
    ContentPart, Error as WitError, Image, Message, Outcome, Role, RunStatus, Task, ToolCall, ToolOutput, ToolSpec,
    Usage,
};
