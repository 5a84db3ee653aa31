//! The OpenAPI 3.1 document of `/api/v1` (`GET /api/v1/openapi.json`), generated
//! by utoipa from the handlers' `#[utoipa::path]` annotations, their request
//! types and the answer shapes in `crate::schema`. `tests/openapi.rs` keeps it
//! equal to the routes the router serves, the error codes in use and real answers.

use axum::Json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{
    alerts, audit, backfills, calendars, datasources, estate, flows, lifecycle, runs, sidecars, sources,
    triggers,
};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Madeira API",
        description = "Madeira's REST API (SPEC §9). Every error answers `{\"error\": {code, message, details}}`; \
                       authenticate with `Authorization: Bearer <token>` when tokens are configured."
    ),
    paths(
        flows::list, flows::get, flows::put, flows::versions, flows::version,
        lifecycle::delete, lifecycle::promote, lifecycle::demote,
        triggers::pause, triggers::event,
        runs::trigger, runs::list, runs::show, runs::cancel, runs::transitions, runs::logs, runs::node_action,
        audit::list, alerts::list, alerts::test, alerts::acknowledge, alerts::silence, sidecars::list, datasources::list, sources::list,
        calendars::list, calendars::show, calendars::put, estate::map, backfills::create, backfills::list,
        backfills::show, backfills::act, document,
    ),
    // Path parameters' enums are not collected from `paths`: listed here.
    components(schemas(crate::schema::FlowAction, crate::schema::NodeAction, crate::schema::BackfillAction)),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The document as JSON.
pub fn spec() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// This document. No token needed: it holds no data.
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    tag = "meta",
    security(()),
    responses((status = 200, description = "the OpenAPI 3.1 document of /api/v1", content_type = "application/json"))
)]
pub async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(spec())
}
