#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "http.h"
#include "manager.h"

/*
 * The web console: one page and its script and style, compiled into the
 * binary from manager/console/ (no CDN, works offline). The files are
 * public; the page calls the JSON API from the browser (/v1/cluster,
 * /v1/cluster/lateness, /v1/tasks/{id}) with the bearer token the user
 * enters when tokens are configured.
 */

#define CONSOLE_PREFIX "/console/"

static const struct console_file *
find(const char *path)
{
	const char *name;

	if (!strcmp(path, "/"))
		name = "index.html";
	else if (!strncmp(path, CONSOLE_PREFIX, strlen(CONSOLE_PREFIX)))
		name = path + strlen(CONSOLE_PREFIX);
	else
		return NULL;
	for (const struct console_file *f = console_files; f->name != NULL; f++)
		if (!strcmp(f->name, name))
			return f;
	return NULL;
}

int
console_path(const char *path)
{
	return find(path) != NULL;
}

void
console_serve(struct evhttp_request *req, const char *path,
	      enum evhttp_cmd_type m)
{
	const struct console_file *f = find(path);
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	struct evbuffer *b;

	if (m != EVHTTP_REQ_GET && m != EVHTTP_REQ_HEAD) {
		http_reply_error(req, 405, "method_not_allowed", NULL,
				 "use GET");
		return;
	}
	evhttp_add_header(h, "Content-Type", f->type);
	/* Everything the page loads or calls is ours: no inline script, no
	 * other origin, no framing. */
	evhttp_add_header(h, "Content-Security-Policy",
			  "default-src 'none'; script-src 'self'; "
			  "style-src 'self'; img-src 'self' data:; "
			  "connect-src 'self'; base-uri 'none'; "
			  "form-action 'none'; frame-ancestors 'none'");
	evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
	evhttp_add_header(h, "Referrer-Policy", "no-referrer");
	evhttp_add_header(h, "Cache-Control", "no-cache");
	b = evbuffer_new();
	evbuffer_add_reference(b, f->data, f->len, NULL, NULL);
	http_send(req, 200, b);
	evbuffer_free(b);
}
