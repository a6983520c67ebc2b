#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "http.h"
#include "metrics.h"
#include "url.h"
#include "xmalloc.h"

const char *
http_reason(int code)
{
	switch (code) {
	case 200: return "OK";
	case 201: return "Created";
	case 204: return "No Content";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 409: return "Conflict";
	case 413: return "Payload Too Large";
	case 415: return "Unsupported Media Type";
	case 429: return "Too Many Requests";
	case 500: return "Internal Server Error";
	case 503: return "Service Unavailable";
	default: return "Unknown";
	}
}

struct evhttp *
http_server_create(struct event_base *base, const char *listen, size_t max_body,
		   int timeout_s, char *err, size_t errlen)
{
	struct evhttp *h = evhttp_new(base);
	char host[256];
	int port;

	if (hostport_parse(listen, host, sizeof(host), &port) < 0) {
		snprintf(err, errlen, "'%s' is not host:port", listen);
		evhttp_free(h);
		return NULL;
	}
	if (evhttp_bind_socket(h, host, (ev_uint16_t)port) != 0) {
		snprintf(err, errlen, "cannot listen on %s (in use?)", listen);
		evhttp_free(h);
		return NULL;
	}
	evhttp_set_max_body_size(h, (ev_ssize_t)max_body);
	evhttp_set_max_headers_size(h, 16384);
	evhttp_set_timeout(h, timeout_s);
	evhttp_set_allowed_methods(
		h, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_DELETE |
			   EVHTTP_REQ_PATCH | EVHTTP_REQ_PUT | EVHTTP_REQ_HEAD);
	evhttp_set_default_content_type(h, "application/json");
	return h;
}

void
http_mark_mykit(struct evhttp_request *req)
{
	struct evkeyvalq *in = evhttp_request_get_input_headers(req);

	evhttp_remove_header(in, HTTP_MYKIT_HEADER);
	evhttp_add_header(in, HTTP_MYKIT_HEADER, "1");
}

/* mykit-delay answers: {"success":true,"data":"<id>","code":200} and
 * {"success":false,"message":"...","code":500}, always HTTP 200. */
static json_t *
to_mykit(int code, json_t *body)
{
	const json_t *e = json_object_get(body, "error");
	json_t *out;

	if (code >= 200 && code < 300 && !json_is_object(e)) {
		const json_t *d = json_object_get(body, "id");

		if (d == NULL)
			d = json_object_get(body, "job");
		out = json_pack("{s:b, s:O, s:i}", "success", 1, "data",
				d ? d : json_null(), "code", 200);
	} else {
		const char *msg =
			json_string_value(json_object_get(e, "message"));

		out = json_pack("{s:b, s:s, s:i}", "success", 0, "message",
				msg ? msg : "failed", "code", 500);
	}
	json_decref(body);
	return out;
}

void
http_reply_json(struct evhttp_request *req, int code, json_t *body)
{
	struct evbuffer *b;
	char *s;

	if (evhttp_find_header(evhttp_request_get_input_headers(req),
			       HTTP_MYKIT_HEADER) != NULL) {
		body = to_mykit(code, body);
		code = 200;
	}
	b = evbuffer_new();
	s = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);

	json_decref(body);
	evbuffer_add(b, s, strlen(s));
	evbuffer_add(b, "\n", 1);
	free(s);
	evhttp_add_header(evhttp_request_get_output_headers(req),
			  "Content-Type", "application/json");
	evhttp_send_reply(req, code, http_reason(code), b);
	evbuffer_free(b);
}

void
http_reply_error(struct evhttp_request *req, int code, const char *ecode,
		 const char *field, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	json_t *e;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	e = json_pack("{s:s, s:s}", "code", ecode, "message", msg);
	if (field != NULL && field[0] != '\0')
		json_object_set_new(e, "field", json_string(field));
	http_reply_json(req, code, json_pack("{s:o}", "error", e));
}

char *
http_body(struct evhttp_request *req, size_t *lenp)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	size_t len = evbuffer_get_length(in);
	char *s = xmalloc(len + 1);

	evbuffer_copyout(in, s, len);
	s[len] = '\0';
	*lenp = len;
	return s;
}

void
http_metrics_cb(struct evhttp_request *req, void *arg)
{
	struct evbuffer *b = evbuffer_new();

	metrics_render(b);
	evhttp_add_header(evhttp_request_get_output_headers(req),
			  "Content-Type", "text/plain; version=0.0.4");
	evhttp_send_reply(req, 200, "OK", b);
	evbuffer_free(b);
}
