package httpapi

import _ "embed"

// openAPI is the OpenAPI 3 document of this face, served at /v1/openapi.json
// and checked against the registered routes by TestOpenAPIMatchesRoutes.
//
//go:embed openapi.json
var openAPI []byte
