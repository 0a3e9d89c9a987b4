//! Host bindings for the worlds of every contract version the host speaks. In each version,
//! interfaces shared between worlds are generated once (in `tool_adapter` or `harness`) and
//! reused through `with`, so that one implementation per version serves every world.

/// The four worlds of the contract in `$path`.
macro_rules! worlds {
    ($path:literal) => {
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

/// `orchard:plugin@0.1.0` (frozen).
pub mod v0_1 {
    worlds!("../../wit/0.1.0");
}

/// `orchard:plugin@0.2.0`.
pub mod v0_2 {
    worlds!("../../wit/0.2.0");
}

pub use v0_1::{browser_driver, grader, harness, tool_adapter};

pub use tool_adapter::orchard::plugin::types::{
    ContentPart, Error as WitError, Image, Message, Outcome, Role, RunStatus, Task, ToolCall, ToolOutput, ToolSpec,
    Usage,
};

/// The host's own errors are made as 0.1.0 errors; a 0.2.0 plugin gets the same error.
impl From<v0_1::tool_adapter::orchard::plugin::types::Error> for v0_2::tool_adapter::orchard::plugin::types::Error {
    fn from(e: v0_1::tool_adapter::orchard::plugin::types::Error) -> Self {
        use v0_1::tool_adapter::orchard::plugin::types::Error as A;
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
