#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static json_t *
load_file(const char *path)
{
	json_error_t jerr;
	json_t *j;

	if (!strcmp(path, "-"))
		j = json_loadf(stdin, 0, &jerr);
	else
		j = json_load_file(path, 0, &jerr);
	if (j == NULL)
		fprintf(stderr, "prophetctl: %s:%d: %s\n",
			strcmp(path, "-") ? path : "stdin", jerr.line,
			jerr.text);
	return j;
}

static int
push_usage(void)
{
	fprintf(stderr,
		"usage: prophetctl push --topic T --body B "
		"(--delay 30s | --due-at MS | --cron EXPR)\n"
		"                       [--id ID] [--key K] [--header K=V]... "
		"[--ttl D] [--max-attempts N]\n"
		"                       [--timezone ZONE] [--misfire "
		"fire_once|fire_all|skip] [--max-occurrences N]\n"
		"                       [--traceparent 00-TRACE-PARENT-FLAGS] "
		"[--tracestate LIST]\n"
		"       prophetctl push --file F   (a task as JSON; - for "
		"stdin)\n");
	return 2;
}

/* prophetctl push: submit one task, print its id. */
int
cmd_push(struct cli *c, int argc, char **argv)
{
	json_t *task = NULL, *headers = NULL, *ans;
	char err[512];
	char *body;
	long st;

	for (int k = 1; k < argc; k++) {
		const char *a = argv[k], *v = k + 1 < argc ? argv[k + 1] : NULL;
		long long ms;

		if (!strcmp(a, "--file") && v) {
			json_decref(task);
			if ((task = load_file(v)) == NULL)
				return 1;
			k++;
			continue;
		}
		if (v == NULL) {
			fprintf(stderr,
				"prophetctl: push: '%s': unknown option, or "
				"its value is missing\n",
				a);
			json_decref(task);
			json_decref(headers);
			return push_usage();
		}
		if (task == NULL)
			task = json_object();
		k++;
		if (!strcmp(a, "--topic") || !strcmp(a, "--body") ||
		    !strcmp(a, "--id") || !strcmp(a, "--key") ||
		    !strcmp(a, "--cron") || !strcmp(a, "--timezone") ||
		    !strcmp(a, "--misfire") || !strcmp(a, "--traceparent") ||
		    !strcmp(a, "--tracestate")) {
			json_object_set_new(task, a + 2, json_string(v));
		} else if (!strcmp(a, "--max-occurrences") ||
			   !strcmp(a, "--due-at") ||
			   !strcmp(a, "--max-attempts")) {
			if (cli_int_opt(a, v, &ms) < 0) {
				json_decref(task);
				json_decref(headers);
				return 2;
			}
			json_object_set_new(task,
					    !strcmp(a, "--due-at") ? "due_at"
					    : !strcmp(a, "--max-attempts")
						    ? "max_attempts"
						    : "max_occurrences",
					    json_integer(ms));
		} else if (!strcmp(a, "--delay") || !strcmp(a, "--ttl")) {
			if ((ms = cli_duration_ms(v)) < 0) {
				fprintf(stderr,
					"prophetctl: %s: bad duration "
					"'%s' (e.g. 1500, 30s, 5m)\n",
					a, v);
				json_decref(task);
				return 2;
			}
			json_object_set_new(task,
					    !strcmp(a, "--delay") ? "delay_ms"
								  : "ttl_ms",
					    json_integer(ms));
		} else if (!strcmp(a, "--header") && strchr(v, '=')) {
			const char *eq = strchr(v, '=');
			char name[256];

			snprintf(name, sizeof(name), "%.*s", (int)(eq - v), v);
			if (headers == NULL) {
				headers = json_object();
				json_object_set(task, "headers", headers);
			}
			json_object_set_new(headers, name, json_string(eq + 1));
		} else {
			if (!strcmp(a, "--header"))
				fprintf(stderr,
					"prophetctl: --header: '%s' is not "
					"NAME=VALUE\n",
					v);
			else
				fprintf(stderr,
					"prophetctl: push: unknown option "
					"'%s'\n",
					a);
			json_decref(task);
			json_decref(headers);
			return push_usage();
		}
	}
	json_decref(headers);
	if (task == NULL)
		return push_usage();
	if (json_object_get(task, "due_at") == NULL &&
	    json_object_get(task, "delay_ms") == NULL &&
	    json_object_get(task, "cron") == NULL) {
		fprintf(stderr,
			"prophetctl: push: when? give --delay, --due-at "
			"or --cron\n");
		json_decref(task);
		return push_usage();
	}
	body = json_dumps(task, JSON_COMPACT);
	json_decref(task);
	st = cli_request(c, "POST", "/v1/tasks", body, &ans, err, sizeof(err));
	free(body);
	if (st != 200 && st != 201)
		return cli_fail(st, ans, err);
	if (c->json)
		cli_print_json(ans);
	else
		printf("%s %s (slot %lld, due %lld)\n",
		       st == 201 ? "accepted" : "already accepted",
		       json_string_value(json_object_get(ans, "id")),
		       (long long)json_integer_value(
			       json_object_get(ans, "slot")),
		       (long long)json_integer_value(
			       json_object_get(ans, "due_at")));
	json_decref(ans);
	return 0;
}
