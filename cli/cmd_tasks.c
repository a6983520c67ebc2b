#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "cli.h"

/* prophetctl cancel ID: exit 0 only when the task will never be
 * published (cancelled now or before). */
int
cmd_cancel(struct cli *c, int argc, char **argv)
{
	char path[1024], err[512];
	json_t *ans;
	long st;

	if (argc != 2) {
		fprintf(stderr, "usage: prophetctl cancel ID\n");
		return 2;
	}
	cli_task_path(path, sizeof(path), argv[1], "");
	st = cli_request(c, "DELETE", path, NULL, &ans, err, sizeof(err));
	if (st != 200)
		return cli_fail(st, ans, err);
	if (c->json)
		cli_print_json(ans);
	else
		printf("cancelled %s\n", argv[1]);
	json_decref(ans);
	return 0;
}

/* prophetctl reschedule ID (--delay D | --due-at MS | --cron EXPR
 * [--timezone ZONE]): a one-shot task gets a due time, a recurring one a
 * new expression (its next occurrence the first after now). */
#define RESCHEDULE_USAGE                                                     \
	"usage: prophetctl reschedule ID (--delay D | --due-at MS | --cron " \
	"EXPR [--timezone ZONE])\n"
int
cmd_reschedule(struct cli *c, int argc, char **argv)
{
	const char *delay = NULL, *due = NULL, *cron = NULL, *zone = NULL;
	char path[1024], err[512];
	json_t *req, *ans = NULL;
	char *body;
	long long v;
	long st;

	for (int k = 2; k < argc; k += 2) {
		const char **slot = !strcmp(argv[k], "--delay")	     ? &delay
				    : !strcmp(argv[k], "--due-at")   ? &due
				    : !strcmp(argv[k], "--cron")     ? &cron
				    : !strcmp(argv[k], "--timezone") ? &zone
								     : NULL;

		if (slot == NULL || k + 1 >= argc || *slot != NULL) {
			fprintf(stderr, RESCHEDULE_USAGE);
			return 2;
		}
		*slot = argv[k + 1];
	}
	if (argc < 4 || (delay != NULL) + (due != NULL) + (cron != NULL) != 1 ||
	    (zone != NULL && cron == NULL)) {
		if (zone != NULL && cron == NULL)
			fprintf(stderr, "prophetctl: --timezone goes with "
					"--cron (a recurring task)\n");
		fprintf(stderr, RESCHEDULE_USAGE);
		return 2;
	}
	if (due != NULL) {
		if (cli_int_opt("--due-at", due, &v) < 0)
			return 2;
		req = json_pack("{s:I}", "due_at", (json_int_t)v);
	} else if (delay != NULL) {
		if ((v = cli_duration_ms(delay)) < 0) {
			fprintf(stderr,
				"prophetctl: --delay: bad duration '%s' (e.g. "
				"1500, 30s, 5m)\n",
				delay);
			return 2;
		}
		req = json_pack("{s:I}", "delay_ms", (json_int_t)v);
	} else {
		req = json_pack("{s:s}", "cron", cron);
		if (zone != NULL)
			json_object_set_new(req, "timezone", json_string(zone));
	}
	body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	cli_task_path(path, sizeof(path), argv[1], "");
	/* A recurring task answers 409 while an occurrence is being
	 * published (milliseconds): try again for a second. */
	for (int tries = 0;; tries++) {
		st = cli_request(c, "PATCH", path, body, &ans, err,
				 sizeof(err));
		if (st != 409 || cron == NULL || tries >= 20)
			break;
		json_decref(ans);
		ans = NULL;
		usleep(50 * 1000);
	}
	free(body);
	if (st != 200)
		return cli_fail(st, ans, err);
	if (c->json)
		cli_print_json(ans);
	else if (cron != NULL)
		printf("rescheduled %s: cron '%s'%s%s, next occurrence %lld\n",
		       argv[1], cron, zone ? " in " : "", zone ? zone : "",
		       (long long)json_integer_value(
			       json_object_get(ans, "due_at")));
	else
		printf("rescheduled %s to %lld\n", argv[1],
		       (long long)json_integer_value(
			       json_object_get(ans, "due_at")));
	json_decref(ans);
	return 0;
}

/* prophetctl list [--topic T] [--status S] [--limit N] [--all] */
int
cmd_list(struct cli *c, int argc, char **argv)
{
	char path[2048], err[512], when[64], *cursor = NULL;
	const char *topic = NULL, *status = NULL, *limit = "50";
	int all = 0, header = 1;
	json_t *ans, *t;
	size_t i;
	long st;

	for (int k = 1; k < argc; k++) {
		if (!strcmp(argv[k], "--all"))
			all = 1;
		else if (k + 1 < argc && !strcmp(argv[k], "--topic"))
			topic = argv[++k];
		else if (k + 1 < argc && !strcmp(argv[k], "--status"))
			status = argv[++k];
		else if (k + 1 < argc && !strcmp(argv[k], "--limit"))
			limit = argv[++k];
		else {
			fprintf(stderr, "usage: prophetctl list [--topic T] "
					"[--status S] [--limit N] [--all]\n");
			return 2;
		}
	}
	do {
		char *et = topic ? curl_escape(topic, 0) : NULL;
		char *es = status ? curl_escape(status, 0) : NULL;
		char *ec = cursor ? curl_escape(cursor, 0) : NULL;

		snprintf(path, sizeof(path), "/v1/tasks?limit=%s%s%s%s%s%s%s",
			 limit, et ? "&topic=" : "", et ? et : "",
			 es ? "&status=" : "", es ? es : "",
			 ec ? "&cursor=" : "", ec ? ec : "");
		curl_free(et);
		curl_free(es);
		curl_free(ec);
		free(cursor);
		cursor = NULL;
		st = cli_request(c, "GET", path, NULL, &ans, err, sizeof(err));
		if (st != 200)
			return cli_fail(st, ans, err);
		if (c->json) {
			cli_print_json(ans);
		} else {
			if (header)
				printf("%-28s %-20s %-10s %-23s %s\n", "ID",
				       "TOPIC", "STATUS", "DUE", "ATTEMPT");
			header = 0;
			json_array_foreach (json_object_get(ans, "tasks"), i, t)
				printf("%-28s %-20s %-10s %-23s %lld\n",
				       json_string_value(
					       json_object_get(t, "id")),
				       json_string_value(
					       json_object_get(t, "topic")),
				       json_string_value(
					       json_object_get(t, "status")),
				       cli_time(json_integer_value(
							json_object_get(
								t, "due_at")),
						when, sizeof(when)),
				       (long long)json_integer_value(
					       json_object_get(t, "attempt")));
		}
		if (json_is_string(json_object_get(ans, "next_cursor")))
			cursor = strdup(json_string_value(
				json_object_get(ans, "next_cursor")));
		json_decref(ans);
	} while (all && cursor != NULL);
	if (cursor != NULL && !c->json)
		printf("(more: --all, or the API's cursor %s)\n", cursor);
	free(cursor);
	return 0;
}
