// /docs: Swagger UI (the swagger-ui-bundle package's own release files, served by the API) over this
// API's /openapi.json. No call leaves this origin: the online validator is off.
window.addEventListener("load", () => {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    defaultModelsExpandDepth: 1,
    defaultModelExpandDepth: 3,
    docExpansion: "list",
    validatorUrl: null,
  });
});
