#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* prophetctl reschedule ID (--delay D | --due-at MS) */
int
cmd_reschedule(struct cli *c, int argc, char **argv)
{
	char path[1024], err[512], body[128];
	json_t *ans;
	long long v;
	long st;

	if (argc != 4 ||
	    (strcmp(argv[2], "--delay") && strcmp(argv[2], "--due-at"))) {
		fprintf(stderr, "usage: prophetctl reschedule ID (--delay D | "
				"--due-at MS)\n");
		return 2;
	}
	if (!strcmp(argv[2], "--due-at")) {
		if (cli_int_opt(argv[2], argv[3], &v) < 0)
			return 2;
	} else if ((v = cli_duration_ms(argv[3])) < 0) {
		fprintf(stderr,
			"prophetctl: --delay: bad duration '%s' (e.g. "
			"1500, 30s, 5m)\n",
			argv[3]);
		return 2;
	}
	snprintf(body, sizeof(body), "{\"%s\":%lld}",
		 !strcmp(argv[2], "--delay") ? "delay_ms" : "due_at", v);
	cli_task_path(path, sizeof(path), argv[1], "");
	st = cli_request(c, "PATCH", path, body, &ans, err, sizeof(err));
	if (st != 200)
		return cli_fail(st, ans, err);
	if (c->json)
		cli_print_json(ans);
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
