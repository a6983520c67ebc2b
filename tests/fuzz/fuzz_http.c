#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

/*
 * libFuzzer target for the HTTP servers: raw bytes from a client, over a
 * real loopback connection, through the gate, the route table and the
 * reply rendering of common/http.c (a table shaped like the manager's:
 * native and mykit-delay routes, public and token-protected ones, {}
 * arguments, task validation and its errors). A crash, a sanitizer report
 * or any answer that is not a well-formed HTTP/1.1 response with a JSON
 * body (libevent's HTML error page, say) is a bug.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>

#include "http.h"
#include "log.h"
#include "task.h"
#include "tz.h"
#include "utf8.h"
#include "xmalloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct event_base *base;
static struct evhttp *srv;
static int port;

/* The argument quoted back: the path of names into messages. */
static void
r_echo(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	(void)ctx;
	if (!task_id_valid(a ? a : "", n)) {
		http_reply_error(req, 400, "invalid_value", "id",
				 "'%.*s' is not an id", (int)n, a ? a : "");
		return;
	}
	http_reply_error(req, 404, "not_found", "id", "no task '%s'", a);
}

/* A submission, validated as the API validates it. */
static void
r_submit(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	const struct task_limits lim = {65536, 315576000000LL, "example.com", 0,
					tz_get};
	struct task_error err;
	json_error_t jerr;
	struct task t;
	size_t len;
	char *body = http_body(req, &len);
	json_t *in = json_loadb(body, len,
				JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);

	(void)ctx;
	(void)a;
	(void)n;
	free(body);
	if (in == NULL) {
		http_reply_error(req, 400, "invalid_json", NULL,
				 "malformed JSON: %s", jerr.text);
		return;
	}
	if (task_from_json(in, &lim, 1796040000000LL, &t, &err) < 0) {
		http_reply_json(req, err.http, task_error_json(&err));
	} else {
		http_reply_json(req, 201, task_to_json(&t, tz_get));
		task_clear(&t);
	}
	json_decref(in);
}

static void
r_query(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	size_t len;
	char *id = http_query_get(req, "jobId", &len);

	(void)ctx;
	(void)a;
	(void)n;
	if (id == NULL || !task_id_valid(id, len))
		http_reply_error(req, 400, "invalid_value", "jobId",
				 "jobId '%s' is not an id", id ? id : "");
	else
		http_reply_json(req, 200, json_pack("{s:s}", "id", id));
	free(id);
}

static void
r_null(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	(void)ctx;
	(void)a;
	(void)n;
	http_reply_json(req, 200, NULL); /* must answer 500, not crash */
}

static const struct http_route routes[] = {
	{EVHTTP_REQ_POST, "/v1/tasks", 1, HTTP_SHAPE_NATIVE,
	 HTTP_ROUTE_STATE | HTTP_ROUTE_JSON, r_submit},
	{EVHTTP_REQ_GET, "/v1/tasks/{}", 2, HTTP_SHAPE_NATIVE, 0, r_echo},
	{EVHTTP_REQ_DELETE, "/v1/tasks/{}", 1, HTTP_SHAPE_NATIVE,
	 HTTP_ROUTE_STATE, r_echo},
	{EVHTTP_REQ_POST, "/v1/tasks/{}/restore", 4, HTTP_SHAPE_NATIVE,
	 HTTP_ROUTE_STATE | HTTP_ROUTE_JSON, r_echo},
	{EVHTTP_REQ_GET, "/healthz", 0, HTTP_SHAPE_NATIVE, 0, r_null},
	{EVHTTP_REQ_POST, "/push", 1, HTTP_SHAPE_MYKIT,
	 HTTP_ROUTE_STATE | HTTP_ROUTE_JSON, r_submit},
	{EVHTTP_REQ_GET, "/delete", 1, HTTP_SHAPE_MYKIT, HTTP_ROUTE_STATE,
	 r_query},
};

/* One token, "fuzz-token", with every role. */
static int
authorize(void *ctx, const char *authorization, int role)
{
	(void)ctx;
	(void)role;
	if (authorization == NULL)
		return 401;
	return strcmp(authorization, "Bearer fuzz-token") ? 403 : 0;
}

static void
setup(void)
{
	struct http_limits lim = {.max_body = 65536,
				  .max_headers = 4096,
				  .timeout_s = 30,
				  .max_connections = 0,
				  .max_body_memory = 1 << 20};
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	char listen[64], err[256];
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	log_init("fuzz", PLOG_FATAL);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &sl) < 0)
		abort();
	port = ntohs(sa.sin_port);
	close(fd);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	base = event_base_new();
	srv = http_server_create(base, listen, &lim, err, sizeof(err));
	if (srv == NULL)
		abort();
	http_server_set_routes(srv, routes, sizeof(routes) / sizeof(routes[0]),
			       authorize, NULL);
}

/*
 * Every answer is HTTP/1.x with a JSON body: of its Content-Length (none,
 * for HEAD: the next answer or the end follows the head), or up to the
 * close for an HTTP/1.0 answer without a length.
 */
static void
check_answers(const char *s, size_t n, int head_sent)
{
	size_t i = 0;

	while (i < n) {
		const char *end = memmem(s + i, n - i, "\r\n\r\n", 4);
		const char *cl;
		size_t hlen, blen;
		json_error_t jerr;
		json_t *j;
		char *head;

		/* HTTP/1.0 requests get HTTP/1.0 answers, possibly without a
		 * length: then the body ends with the connection. */
		if (end == NULL || n - i < 12 ||
		    (memcmp(s + i, "HTTP/1.1 ", 9) &&
		     memcmp(s + i, "HTTP/1.0 ", 9)))
			abort();
		hlen = (size_t)(end - (s + i)) + 4;
		head = xstrndup(s + i, hlen);
		if (strcasestr(head, "content-type: application/json") == NULL)
			abort();
		cl = strcasestr(head, "content-length: ");
		if (cl == NULL && memcmp(s + i, "HTTP/1.0 ", 9))
			abort();
		blen = cl ? strtoul(cl + 16, NULL, 10) : n - i - hlen;
		free(head);
		if (head_sent &&
		    (i + hlen == n || (n - i - hlen >= 9 &&
				       !memcmp(s + i + hlen, "HTTP/1.", 7)))) {
			i += hlen;
			continue;
		}
		if (i + hlen + blen > n)
			abort();
		j = json_loadb(s + i + hlen, blen, 0, &jerr);
		if (!json_is_object(j))
			abort();
		if (json_object_get(j, "error") == NULL &&
		    json_object_get(j, "success") == NULL &&
		    json_object_get(j, "id") == NULL)
			abort();
		json_decref(j);
		i += hlen + blen;
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	char *got = NULL;
	size_t len = 0, cap = 0, sent = 0;
	int fd, quiet = 0;

	if (base == NULL)
		setup();
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)port);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	fcntl(fd, F_SETFL, O_NONBLOCK);
	/* libFuzzer's timers interrupt blocking calls: connect without. */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 &&
	    errno != EINPROGRESS) {
		fprintf(stderr, "connect: %s\n", strerror(errno));
		abort();
	}
	/* Until the server has said all it will say about these bytes. */
	while (quiet < 10) {
		ssize_t k;
		char buf[65536];
		int progress = 0;

		if (sent < size) {
			k = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
			if (k > 0) {
				sent += (size_t)k;
				progress = 1;
			}
		}
		event_base_loop(base, EVLOOP_NONBLOCK);
		while ((k = recv(fd, buf, sizeof(buf), 0)) > 0) {
			if (len + (size_t)k > cap) {
				cap = (len + (size_t)k) * 2;
				got = xrealloc(got, cap);
			}
			memcpy(got + len, buf, (size_t)k);
			len += (size_t)k;
			progress = 1;
		}
		if (k == 0)
			break; /* the server closed */
		quiet = progress ? 0 : quiet + 1;
	}
	close(fd);
	for (int i = 0; i < 5; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
	check_answers(got ? got : "", len,
		      memmem(data, size, "HEAD ", 5) != NULL);
	free(got);
	return 0;
}
