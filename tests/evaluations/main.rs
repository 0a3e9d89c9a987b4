//! Evaluations end to end: the CLI, the service, harnesses, graders, plugins and contract
//! versions, converters, the OpenAPI document, the web UI, training groups, exports, the
//! Python client and a real model server. One binary; each module is one behaviour's tests.

mod contract_versions;
mod convert_swe_bench;
mod credit_export;
mod eval;
mod evals_service;
mod graders;
mod harbor_environment;
mod harnesses;
mod inspect_sandbox;
mod kimi_cli_faithful;
mod llama_cpp;
mod mcp_servers;
mod mini_swe_faithful;
mod multi_step;
mod openapi;
mod openenv;
mod openhands_faithful;
mod plugins;
mod program_harness;
mod sdk_compat;
mod service_on_fake;
mod swe;
mod templates;
mod training_groups;
mod verifier_forgeries;
mod web_ui;
mod zeroclaw_faithful;
