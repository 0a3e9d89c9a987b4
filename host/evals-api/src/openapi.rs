//! The evaluation service's part of `/v1/openapi.json`: every route of [`crate::routes`], with
//! its parameters and body schemas, from the annotations on the handlers.

use orchard_api_kit::Problem;
use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
    paths(
        crate::datasets::upload,
        crate::datasets::list,
        crate::datasets::delete,
        crate::evals::submit,
        crate::evals::list,
        crate::evals::get_one,
        crate::evals::rollouts,
        crate::evals::rollout,
        crate::evals::cancel,
        crate::evals::delete,
        crate::evals::retry,
        crate::evals::export,
        crate::events::stream,
        crate::secrets::list,
        crate::secrets::put,
        crate::secrets::delete,
    ),
    components(schemas(Problem))
)]
/// The service's OpenAPI document.
pub struct EvalsDoc;
