// Swagger UI on this service's own OpenAPI document (a file, not inline: the page's
// Content-Security-Policy allows scripts from the service only).
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: document.getElementById("swagger-ui").dataset.url,
    dom_id: "#swagger-ui",
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
    // "Try it out" signs in and out with the session cookie, as the frontend does.
    withCredentials: true,
  });
});
