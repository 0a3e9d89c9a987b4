//! OpenAPI schemas the derive cannot write.

use utoipa::PartialSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::Schema;

/// The schema of a body that adds its own fields to a shared struct's (read with
/// [`crate::take_field`] and [`crate::parse_rest`]): one object with the shared struct's properties
/// and `extra` (name, schema, required), refusing any other property as the body does. OpenAPI's
/// `allOf` cannot say this: a branch that forbids other properties forbids the other branch's too,
/// so the derived schema of a `#[serde(flatten)]` field contradicts itself.
pub fn object_with<B: PartialSchema>(extra: &[(&str, RefOr<Schema>, bool)]) -> RefOr<Schema> {
    let mut object = match B::schema() {
        RefOr::T(Schema::Object(object)) => object,
        other => return other,
    };
    for (name, schema, required) in extra {
        object.properties.insert(name.to_string(), schema.clone());
        if *required {
            object.required.push(name.to_string());
        }
    }
    RefOr::T(Schema::Object(object))
}
