//! `GET /v1/openapi.json`: every `/v1` route, made from the `#[utoipa::path]` annotations on
//! the handlers (and, for the routes forwarded to the agent as they are, on the stubs below),
//! merged with the evaluation service's document. `tests/evaluations/openapi.rs` checks it against the
//! routes the router really has.

use axum::Json;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityScheme};
use utoipa::{Modify, OpenApi};

use orchard_api_kit::Problem;

const ID: &str = "The sandbox id";

#[derive(OpenApi)]
#[openapi(
    info(title = "Orchard", description = "Sandboxes, plugins and hosted evaluations for LLM agents"),
    paths(
        health,
        crate::ready,
        document,
        crate::routes_v1::create,
        crate::routes_v1::list,
        crate::routes_v1::get_one,
        crate::routes_v1::delete,
        crate::routes_v1::create_batch,
        crate::routes_v1::fork,
        crate::routes_v1::exec,
        crate::routes_v1::exec_batch,
        crate::routes_v1::session_start,
        crate::routes_v1::session_list,
        crate::routes_v1::session_close,
        crate::routes_v1::session_exec,
        crate::routes_v1::session_continue,
        crate::routes_v1::process_start,
        crate::routes_v1::process_list,
        crate::routes_v1::process_get,
        crate::routes_v1::process_signal,
        crate::routes_v1::process_log,
        file_read,
        file_write,
        file_remove,
        file_list,
        file_stat,
        tar_download,
        tar_upload,
        crate::routes_desktop::start,
        crate::routes_desktop::vnc,
        crate::routes_desktop::forward_get,
        crate::routes_desktop::forward_post,
        crate::routes_plugins::list,
        crate::routes_plugins::upload,
    ),
    components(schemas(Problem)),
    modifiers(&KeyHeader),
    security(("api_key" = []))
)]
struct ServerDoc;

/// Every route takes the tenant's key in `X-API-Key` (unless the server runs without keys).
struct KeyHeader;

impl Modify for KeyHeader {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components
            .add_security_scheme("api_key", SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("X-API-Key"))));
    }
}

/// The whole `/v1` document.
pub fn document_value() -> utoipa::openapi::OpenApi {
    let mut doc = ServerDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_string();
    doc.merge(orchard_evals_api::openapi::EvalsDoc::openapi());
    doc.merge(orchard_groups::openapi_paths());
    doc.merge(orchard_model_proxy::openapi_paths());
    doc.merge(orchard_openenv::openapi_paths());
    doc
}

#[utoipa::path(get, path = "/v1/openapi.json", tag = "service", summary = "This document", security(()),
    responses((status = 200, description = "OpenAPI 3.1", body = serde_json::Value)))]
pub async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(document_value())
}

#[utoipa::path(get, path = "/v1/health", tag = "service", summary = "Liveness", security(()),
    responses((status = 200, description = "Alive", body = serde_json::Value)))]
#[allow(dead_code)]
fn health() {}

// The file and tar routes are forwarded to the sandbox's agent as they are (streamed both
// ways); these stubs carry their documentation.

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files", tag = "files", summary = "Read a file (raw bytes)",
    params(("id" = String, Path, description = ID), ("path" = String, Query, description = "The file")),
    responses((status = 200, description = "The file's bytes", content_type = "application/octet-stream", body = Vec<u8>),
        (status = "4XX", description = "Refused", body = Problem)))]
#[allow(dead_code)]
fn file_read() {}

#[utoipa::path(put, path = "/v1/sandboxes/{id}/files", tag = "files", summary = "Write a file atomically (raw bytes)",
    params(("id" = String, Path, description = ID), ("path" = String, Query, description = "The file"),
        ("mode" = Option<String>, Query, description = "Octal permission bits, e.g. 755"),
        ("create_parents" = Option<bool>, Query, description = "Create missing parent directories (default true)")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 200, description = "Written", body = orchard_protocol::WriteResult),
        (status = "4XX", description = "Refused", body = Problem)))]
#[allow(dead_code)]
fn file_write() {}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}/files", tag = "files", summary = "Remove a file or directory",
    params(("id" = String, Path, description = ID), ("path" = String, Query, description = "What to remove"),
        ("recursive" = Option<bool>, Query, description = "Remove a directory with what it holds")),
    responses((status = 204, description = "Removed"), (status = "4XX", description = "Refused", body = Problem)))]
#[allow(dead_code)]
fn file_remove() {}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files/list", tag = "files", summary = "List a directory",
    params(("id" = String, Path, description = ID), ("path" = String, Query, description = "The directory")),
    responses((status = 200, description = "Its entries", body = orchard_protocol::Listing),
        (status = "4XX", description = "Refused", body = Problem)))]
#[allow(dead_code)]
fn file_list() {}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files/stat", tag = "files", summary = "One file's metadata",
    params(("id" = String, Path, description = ID), ("path" = String, Query, description = "The file")),
    responses((status = 200, description = "Its metadata", body = orchard_protocol::FileEntry),
        (status = "4XX", description = "Refused", body = Problem)))]
#[allow(dead_code)]
fn file_stat() {}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/tar", tag = "files", summary = "A directory as a tar stream",
    params(("id" = String, Path, description = ID), ("path" = String, Query, description = "The directory")),
    responses((status = 200, description = "A tar archive", content_type = "application/x-tar", body = Vec<u8>),
        (status = "4XX", description = "Refused", body = Problem)))]
#[allow(dead_code)]
fn tar_download() {}

#[utoipa::path(put, path = "/v1/sandboxes/{id}/tar", tag = "files", summary = "Unpack a tar stream into a directory",
    params(("id" = String, Path, description = ID), ("path" = String, Query, description = "The directory")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "A tar archive (any content type)"),
    responses((status = 200, description = "Unpacked", body = orchard_protocol::WriteResult),
        (status = "4XX", description = "Refused", body = Problem)))]
#[allow(dead_code)]
fn tar_upload() {}
