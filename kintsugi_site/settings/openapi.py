"""The OpenAPI schema's settings (drf-spectacular): served docs from the sidecar, no CDN."""
SPECTACULAR_SETTINGS = {
    "TITLE": "kintsugi API",
    "DESCRIPTION": "What did this source touch? Blast radius, incidents, explain paths, fact history, review.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "kintsugi_site.api.schema.add_error_responses",
        "kintsugi_site.api.schema.add_replay_headers",
        "kintsugi_site.api.schema.patch_takes_what_put_takes",
    ],
}
