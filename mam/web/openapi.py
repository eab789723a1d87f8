"""`GET /api/openapi.json`: the API of `mam serve` as an OpenAPI 3.1 document, written by hand (the documents
themselves are mam's own, described in docs/json.md and mam/schemas/; a test checks its paths against the app's
routes)."""

from __future__ import annotations

from typing import Any

_ERROR = {"description": "refused: {\"error\": one line, \"exit\": the CLI's exit code}",
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"},
         "description": "the agent's name (no control characters, `/`, `\\`, `.` or `..`)"}
_WHERE = [{"name": "server", "in": "query", "schema": {"type": "string"}, "description": "its server (--server)"},
          {"name": "host", "in": "query", "schema": {"type": "string"}, "description": "its host (--host)"}]


def _json(description: str, schema: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"description": description}
    if schema is not None:
        body["content"] = {"application/json": {"schema": {"description": f"mam/schemas/{schema}"}}}
    return body


def _action(summary: str, schema: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"post": {
        "summary": summary, "parameters": [_NAME, *_WHERE],
        "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
        "responses": {"200": _json(f"the document of the CLI command's --json ({schema})", schema),
                      **{code: _ERROR for code in ("400", "401", "403", "404", "409", "413", "422", "429")}},
        "security": [{"bearer": []}, {"session": [], "csrf": []}]}}


def document() -> dict[str, Any]:
    text: dict[str, Any] = {"text/html": {}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "mam serve", "version": "1",
                 "description": "The fleet of mam agents over HTTP (docs/serve.md). Off loopback, or with "
                                "--token-file, every route but /login takes the bearer token or a session cookie."},
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "session": {"type": "apiKey", "in": "cookie", "name": "mam_session"},
                "csrf": {"type": "apiKey", "in": "header", "name": "X-CSRF-Token"}},
            "schemas": {"Error": {"type": "object", "required": ["error", "exit"], "properties": {
                "error": {"type": "string"}, "exit": {"type": "integer"}, "hint": {"type": ["string", "null"]},
                "document": {"type": "object"}}}}},
        "paths": {
            "/": {"get": {"summary": "the page", "responses": {"200": {"description": "HTML", "content": text},
                                                                "303": {"description": "to /login"}}}},
            "/static/{file}": {"get": {"summary": "the page's own files", "parameters": [
                {"name": "file", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "the file"}, "404": _ERROR}}},
            "/login": {
                "get": {"summary": "the login page", "responses": {"200": {"description": "HTML", "content": text}}},
                "post": {"summary": "log in with the token (form field `token`); sets the session cookie",
                         "requestBody": {"content": {"application/x-www-form-urlencoded": {"schema": {
                             "type": "object", "properties": {"token": {"type": "string"}}}}}},
                         "responses": {"303": {"description": "to / (to /login?failed=1 for a browser, wrong)"},
                                       "401": _ERROR, "403": _ERROR, "429": _ERROR}}},
            "/logout": {"post": {"summary": "end the session", "responses": {"303": {"description": "to /login"}}}},
            "/api/session": {"get": {"summary": "the page's CSRF token, whether the server is read-only, the user",
                                     "responses": {"200": _json("{schema, csrf, read_only, user, token_required}"),
                                                   "401": _ERROR}}},
            "/api/status": {"get": {
                "summary": "mam status --json", "parameters": [
                    {"name": "server", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}},
                    {"name": "state", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}},
                    {"name": "host", "in": "query", "schema": {"type": "string"}}],
                "responses": {"200": _json("the status document", "status.json"), "401": _ERROR, "422": _ERROR}}},
            "/api/fleet": {"get": {"summary": "the view of mam top: rows, servers not answering, time",
                                   "responses": {"200": _json("the fleet document (docs/serve.md)"),
                                                 "401": _ERROR}}},
            "/api/events": {"get": {
                "summary": "Server-Sent Events: `fleet` (the fleet document) when the view changes, `change` (one "
                           "line of mam watch --json) per change into blocked or done, a comment every 15 s",
                "responses": {"200": {"description": "text/event-stream",
                                      "content": {"text/event-stream": {}}},
                              "401": _ERROR, "503": _ERROR}}},
            "/api/agents/{name}/peek": {"get": {
                "summary": "mam peek --json", "parameters": [
                    _NAME, *_WHERE, {"name": "lines", "in": "query", "schema": {"type": "integer"}}],
                "responses": {"200": _json("the peek document", "peek.json"),
                              **{c: _ERROR for c in ("400", "401", "404", "409", "422")}}}},
            "/api/agents/{name}/send": _action("mam send NAME TEXT [--enter]", "send.json", {
                "type": "object", "properties": {"text": {"type": "string"}, "enter": {"type": "boolean"}}}),
            "/api/agents/{name}/answer": _action("mam send NAME --answer TEXT --enter", "send.json", {
                "type": "object", "properties": {"text": {"type": "string"}}}),
            "/api/agents/{name}/stop": _action("mam stop NAME", "stop.json", {
                "type": "object", "required": ["confirm"], "properties": {"confirm": {"const": True}}}),
            "/api/agents/{name}/restore": _action("mam restore NAME (unsigned specs refused: 409)", "restore.json",
                                                  {"type": "object"}),
            "/metrics": {"get": {"summary": "Prometheus text format (loopback, or with the token)",
                                 "responses": {"200": {"description": "metrics",
                                                       "content": {"text/plain": {}}}, "401": _ERROR}}},
            "/api/openapi.json": {"get": {"summary": "this document",
                                          "responses": {"200": _json("OpenAPI 3.1")}}},
        },
    }
