#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <event2/buffer.h>
#include <event2/http.h>

#include "http.h"
#include "manager.h"

/*
 * GET /v1/openapi.json: the API description. docs/openapi.yaml is the
 * source; make turns it into manager/openapi_json.c (scripts/openapi-json),
 * so the manager serves exactly what the repository describes.
 */
void
openapi_get(struct manager *mg, struct evhttp_request *req)
{
	struct evbuffer *b = evbuffer_new();

	(void)mg;
	evhttp_add_header(evhttp_request_get_output_headers(req),
			  "Content-Type", "application/json");
	evbuffer_add_reference(b, openapi_json, openapi_json_len, NULL, NULL);
	http_send(req, 200, b);
	evbuffer_free(b);
}
