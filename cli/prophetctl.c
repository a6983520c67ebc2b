#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "cfg.h"
#include "cli.h"
#include "httpcli.h"
#include "log.h"
#include "xmalloc.h"

static const struct cli_cmd commands[] = {
	{"push", "push --topic T --body B (--delay D | --due-at MS) [...]",
	 "submit a task (or a JSON task with --file F, - for stdin)", cmd_push},
	{"get", "get ID [--log]", "show a task, --log with its state changes",
	 cmd_get},
	{"cancel", "cancel ID",
	 "cancel a task (exit 0: it will never be "
	 "published)",
	 cmd_cancel},
	{"reschedule",
	 "reschedule ID (--delay D | --due-at MS | --cron EXPR [--timezone Z])",
	 "move a task that has not fired yet; a recurring one: its expression",
	 cmd_reschedule},
	{"list", "list [--topic T] [--status S] [--limit N] [--all]",
	 "list tasks by due time", cmd_list},
	{"restore", "restore [--slot N] [--expired] | --id ID",
	 "rebuild the Redis index from the DB (--expired: expired tasks "
	 "fire again)",
	 cmd_restore},
	{"prune", "prune [--dry-run | --now [--no-wait]]",
	 "retention: the last pass; --dry-run: what a pass would delete; "
	 "--now: a pass now, with a progress bar",
	 cmd_prune},
	{"bulk",
	 "bulk cancel|shift|set-due [--topic T] [--due-from MS] [--due-to MS] "
	 "[--status S] [--id-prefix P] [--key K] [--all] [--by-ms N | "
	 "--due-at MS] [--dry-run] [--no-wait]",
	 "cancel or reschedule every scheduled task a filter matches (a job, "
	 "with a progress bar; --dry-run: count them)",
	 cmd_bulk},
	{"jobs", "jobs [ID [--wait | --cancel]]",
	 "the bulk jobs (who, filter, counts), or one; --wait: follow it; "
	 "--cancel: stop it (its chunk in progress rolls back)",
	 cmd_jobs},
	{"schedule", "schedule [--from T] [--to T] [--step D] [--topic T]",
	 "the booked load: scheduled tasks due per step (default the next "
	 "24 h by the hour), as a text histogram",
	 cmd_schedule},
	{"cluster", "cluster",
	 "master, workers and every slot's owner, "
	 "epoch, backlog and lag",
	 cmd_cluster},
	{"topics", "topics",
	 "per topic: pending and overdue tasks, next due time, paused since, "
	 "fired in the last minute",
	 cmd_topics},
	{"pause", "pause TOPIC",
	 "hold the topic's tasks (they stay scheduled) until resumed",
	 cmd_pause},
	{"resume", "resume TOPIC --policy fire|skip [--rate N]",
	 "release a paused topic: what fell due meanwhile fires (oldest "
	 "first, at most N/s) or expires",
	 cmd_resume},
	{"token-hash", "token-hash < TOKENFILE",
	 "print the sha256: form of the token on stdin, for http.tokens_file",
	 cmd_token_hash},
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

/* Whether the last request carried a token: a 401 without one says where
 * prophetctl takes it from. */
static int token_sent;

long
cli_request(const struct cli *c, const char *method, const char *path,
	    const char *body, json_t **out, char *errmsg, size_t errlen)
{
	char *hdrs[3] = {NULL, NULL, NULL};
	char url[1024], auth[400];
	struct httpcli_req rq = {
		.method = method,
		.url = url,
		.headers = hdrs,
		.body = body,
		.body_len = body ? strlen(body) : 0,
		.timeout_ms = 30000,
		.ca_file = c->cacert,
		.whole_body = 1,
		.insecure = c->insecure,
		.cert_file = c->cert,
		.key_file = c->key,
		.user_agent = "prophetctl/" VERSION,
	};
	struct httpcli_result res;
	long status = 0;
	int nh = 0;

	*out = NULL;
	snprintf(url, sizeof(url), "%s%s", c->url, path);
	if (body != NULL)
		hdrs[nh++] = "Content-Type: application/json";
	token_sent = c->token[0] != '\0';
	if (token_sent) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s",
			 c->token);
		hdrs[nh++] = auth;
	}
	httpcli_request_blocking(NULL, &rq, &res);
	explicit_bzero(auth, sizeof(auth));
	if (res.transport) {
		/* The URL without its password (--url https://u:p@host);
		 * the client-certificate hint only where the connection was
		 * made and the server then broke it off (TLS alert, send or
		 * receive failure), not for a host that does not resolve or
		 * a port nobody listens on. */
		char masked[1024];

		snprintf(errmsg, errlen, "%s: %s%s%s",
			 log_mask_url(url, masked, sizeof(masked)), res.error,
			 res.cls == HTTPCLI_TLS && !c->insecure
				 ? " (check the CA, --cacert or http.tls_ca, "
				   "and that the server's certificate names "
				   "this host)"
				 : "",
			 !strncmp(url, "https:", 6) && c->cert[0] == '\0' &&
					 (res.cls == HTTPCLI_TLS ||
					  res.cls == HTTPCLI_ERROR)
				 ? " (a server with http.tls_client_ca also "
				   "wants a client certificate: --client-cert "
				   "and --client-key, or http.tls_client_cert)"
				 : "");
	} else {
		status = res.status;
		if (res.body_len > 0)
			*out = json_loadb(res.body, res.body_len, 0, NULL);
		if (*out == NULL)
			snprintf(errmsg, errlen, "HTTP %ld: %.200s", status,
				 res.body_len > 0 ? res.body
						  : "(empty answer)");
	}
	httpcli_result_clear(&res);
	return status;
}

int
cli_fail(long status, const json_t *answer, const char *errmsg)
{
	const json_t *e = json_object_get(answer, "error");

	if (status == 0 || e == NULL) {
		fprintf(stderr, "prophetctl: %s\n", errmsg);
		return 1;
	}
	fprintf(stderr, "prophetctl: HTTP %ld %s: %s", status,
		json_string_value(json_object_get(e, "code")),
		json_string_value(json_object_get(e, "message")));
	if (json_is_string(json_object_get(e, "field")))
		fprintf(stderr, " (field %s)",
			json_string_value(json_object_get(e, "field")));
	fputc('\n', stderr);
	if (status == 401 && !token_sent)
		fprintf(stderr, "prophetctl: no token was sent: give --token, "
				"PROPHET_TOKEN, or http.token_file in the "
				"configuration (e.g. in [http@prophetctl])\n");
	return 1;
}

void
cli_print_json(const json_t *j)
{
	json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	fputc('\n', stdout);
}

int
cli_int(const char *s, long long *v)
{
	char *end;

	errno = 0;
	*v = strtoll(s, &end, 10);
	return *s != '\0' && *end == '\0' && errno == 0 ? 0 : -1;
}

int
cli_int_opt(const char *opt, const char *s, long long *v)
{
	if (cli_int(s, v) == 0)
		return 0;
	fprintf(stderr, "prophetctl: %s: '%s' is not an integer%s\n", opt, s,
		!strncmp(opt, "--due", 5) ? " (ms since the epoch)" : "");
	return -1;
}

long long
cli_duration_ms(const char *s)
{
	char *end;
	long long v = strtoll(s, &end, 10);

	if (end == s || v < 0)
		return -1;
	if (*end == '\0' || !strcmp(end, "ms"))
		return v;
	if (!strcmp(end, "s"))
		return v * 1000;
	if (!strcmp(end, "m"))
		return v * 60000;
	if (!strcmp(end, "h"))
		return v * 3600000;
	if (!strcmp(end, "d"))
		return v * 86400000;
	return -1;
}

const char *
cli_time(long long ms, char *buf, size_t len)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	size_t n;

	localtime_r(&t, &tm);
	n = strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
	snprintf(buf + n, len - n, ".%03lld", ms % 1000);
	return buf;
}

void
cli_task_path(char *buf, size_t len, const char *id, const char *rest)
{
	char *esc = curl_escape(id, 0);

	/* A segment of dots alone is a dot segment: libcurl (as any URL
	 * library) removes it, and "." or ".." would name the path above.
	 * The manager decodes %2E. */
	if (!strcmp(id, "."))
		snprintf(buf, len, "/v1/tasks/%%2E%s", rest);
	else if (!strcmp(id, ".."))
		snprintf(buf, len, "/v1/tasks/%%2E%%2E%s", rest);
	else
		snprintf(buf, len, "/v1/tasks/%s%s", esc, rest);
	curl_free(esc);
}

long long
cli_num(const json_t *o, const char *field)
{
	return (long long)json_integer_value(json_object_get(o, field));
}

void
cli_bar(long long done, long long total, const char *fmt, ...)
{
	int width = 30, fill;
	va_list ap;

	if (done > total)
		total = done;
	fill = total > 0 ? (int)(done * width / total) : width;
	fprintf(stderr, "\r[%.*s%*s] ", fill, "##############################",
		width - fill, "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fflush(stderr);
}

json_t *
cli_follow(const struct cli *c, const char *path, unsigned interval_ms,
	   void (*draw)(const json_t *st), long *code, char *err, size_t errlen)
{
	int tty = isatty(STDERR_FILENO) && !c->json;
	json_t *st = NULL;

	for (;;) {
		json_decref(st);
		*code = cli_request(c, "GET", path, NULL, &st, err, errlen);
		if (*code != 200)
			break;
		if (tty)
			draw(st);
		if (json_is_true(json_object_get(st, "done")))
			break;
		usleep(interval_ms * 1000);
	}
	if (tty)
		fputc('\n', stderr);
	return st;
}

static void
usage(FILE *fp)
{
	fprintf(fp, "usage: prophetctl [-c FILE] [--set K=V] [--url URL] "
		    "[--token T] [--cacert FILE] [--insecure]\n"
		    "                  [--client-cert FILE --client-key FILE] "
		    "[--json]\n"
		    "                  COMMAND [ARGS]\n\ncommands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(fp, "  %-58s %s\n", commands[i].usage,
			commands[i].help);
	fprintf(fp,
		"\nThe API address is http.listen of the configuration "
		"(default /etc/prophet/prophet.conf)\nunless --url is "
		"given; the token is --token, else PROPHET_TOKEN, else\n"
		"http.token_file's or http.token (a [http@prophetctl] "
		"section may set them).\nIt is HTTPS when http.tls_cert "
		"is set; the "
		"server's certificate is\nchecked against --cacert, else "
		"http.tls_ca, else the system's CAs (--insecure:\nnot at "
		"all). A server asking for a client certificate gets "
		"--client-cert and --client-key, else\nhttp.tls_client_cert "
		"and http.tls_client_key. --json prints the server's\n"
		"answers as JSON.\n"
		"Exit status: 0 done, 1 refused or failed, 2 usage.\n");
}

int
main(int argc, char **argv)
{
	struct cli c;
	int i, rc;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		}
	}
	memset(&c, 0, sizeof(c));
	log_init("prophetctl", PLOG_WARN);
	c.cfg = cfg_from_args(&argc, argv, "prophetctl",
			      "Prophet command-line client.");
	snprintf(c.url, sizeof(c.url), "%s://%s",
		 cfg_str(c.cfg, CFG_HTTP_TLS_CERT)[0] ? "https" : "http",
		 cfg_str(c.cfg, CFG_HTTP_LISTEN));
	snprintf(c.cacert, sizeof(c.cacert), "%s",
		 cfg_str(c.cfg, CFG_HTTP_TLS_CA));
	snprintf(c.cert, sizeof(c.cert), "%s",
		 cfg_str(c.cfg, CFG_HTTP_TLS_CLIENT_CERT));
	snprintf(c.key, sizeof(c.key), "%s",
		 cfg_str(c.cfg, CFG_HTTP_TLS_CLIENT_KEY));
	if (getenv("PROPHET_TOKEN") != NULL) {
		snprintf(c.token, sizeof(c.token), "%s",
			 getenv("PROPHET_TOKEN"));
	} else {
		/* http.token, or http.token_file (e.g. in [http@prophetctl]) */
		char err[512], *tok = cfg_http_token(c.cfg, err, sizeof(err));

		if (tok == NULL) {
			fprintf(stderr, "prophetctl: %s\n", err);
			cfg_destroy(c.cfg);
			return 2;
		}
		snprintf(c.token, sizeof(c.token), "%s", tok);
		explicit_bzero(tok, strlen(tok));
		xfree(tok);
	}
	/* --json may come before or after the command. */
	for (i = 1; i < argc;) {
		if (!strcmp(argv[i], "--json")) {
			c.json = 1;
			memmove(&argv[i], &argv[i + 1],
				(size_t)(argc - i) * sizeof(char *));
			argc--;
		} else {
			i++;
		}
	}
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			c.json = 1;
		} else if (!strcmp(argv[i], "--token") && i + 1 < argc) {
			snprintf(c.token, sizeof(c.token), "%s", argv[++i]);
		} else if (!strcmp(argv[i], "--cacert") && i + 1 < argc) {
			snprintf(c.cacert, sizeof(c.cacert), "%s", argv[++i]);
		} else if (!strcmp(argv[i], "--insecure")) {
			c.insecure = 1;
		} else if (!strcmp(argv[i], "--client-cert") && i + 1 < argc) {
			snprintf(c.cert, sizeof(c.cert), "%s", argv[++i]);
		} else if (!strcmp(argv[i], "--client-key") && i + 1 < argc) {
			snprintf(c.key, sizeof(c.key), "%s", argv[++i]);
		} else if (!strcmp(argv[i], "--url") && i + 1 < argc) {
			snprintf(c.url, sizeof(c.url), "%s", argv[++i]);
			if (c.url[0] && c.url[strlen(c.url) - 1] == '/')
				c.url[strlen(c.url) - 1] = '\0';
		} else {
			break;
		}
	}
	if (i >= argc) {
		usage(stderr);
		cfg_destroy(c.cfg);
		return 2;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	rc = -1;
	for (size_t k = 0; k < NCOMMANDS; k++)
		if (!strcmp(argv[i], commands[k].name))
			rc = commands[k].run(&c, argc - i, argv + i);
	if (rc == -1) {
		fprintf(stderr, "prophetctl: unknown command '%s'\n", argv[i]);
		usage(stderr);
		rc = 2;
	}
	curl_global_cleanup();
	cfg_destroy(c.cfg);
	return rc;
}
