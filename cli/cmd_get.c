#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <string.h>

#include "cli.h"

static void
print_field(const json_t *t, const char *field)
{
	const json_t *v = json_object_get(t, field);
	char when[64];

	if (v == NULL || json_is_null(v))
		return;
	if (json_is_integer(v) && strstr(field, "_at") != NULL)
		printf("%-16s %s (%lld)\n", field,
		       cli_time(json_integer_value(v), when, sizeof(when)),
		       (long long)json_integer_value(v));
	else if (json_is_string(v))
		printf("%-16s %s\n", field, json_string_value(v));
	else {
		char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);

		printf("%-16s %s\n", field, s);
		free(s);
	}
}

/* prophetctl get ID [--log] */
int
cmd_get(struct cli *c, int argc, char **argv)
{
	static const char *const fields[] = {"id",	    "status",
					     "topic",	    "due_at",
					     "fired_at",    "delivered_at",
					     "attempt",	    "slot",
					     "epoch",	    "owner",
					     "key",	    "headers",
					     "callback",    "callback_status",
					     "ttl_ms",	    "created_at",
					     "cron",	    "timezone",
					     "misfire",	    "start_at",
					     "end_at",	    "max_occurrences",
					     "occurrences", "next_occurrences",
					     "body",	    NULL};
	const char *id = NULL;
	char path[1024], err[512], when[64];
	json_t *ans, *e;
	int log = 0;
	size_t i;
	long st;

	for (int k = 1; k < argc; k++) {
		if (!strcmp(argv[k], "--log"))
			log = 1;
		else if (id != NULL || !strncmp(argv[k], "--", 2))
			id = ""; /* a second id, an unknown option */
		else
			id = argv[k];
	}
	if (id == NULL || *id == '\0') {
		fprintf(stderr, "usage: prophetctl get ID [--log]\n");
		return 2;
	}
	cli_task_path(path, sizeof(path), id, log ? "?log=1" : "");
	st = cli_request(c, "GET", path, NULL, &ans, err, sizeof(err));
	if (st != 200)
		return cli_fail(st, ans, err);
	if (c->json) {
		cli_print_json(ans);
		json_decref(ans);
		return 0;
	}
	for (int k = 0; fields[k]; k++)
		print_field(ans, fields[k]);
	json_array_foreach (json_object_get(ans, "log"), i, e) {
		const char *note =
			json_string_value(json_object_get(e, "note"));

		printf("%-16s %s  %s -> %s  by %s epoch %lld attempt "
		       "%lld%s%s\n",
		       i == 0 ? "log" : "",
		       cli_time(json_integer_value(json_object_get(e, "at")),
				when, sizeof(when)),
		       json_string_value(json_object_get(e, "from")),
		       json_string_value(json_object_get(e, "to")),
		       json_string_value(json_object_get(e, "actor")),
		       (long long)json_integer_value(
			       json_object_get(e, "epoch")),
		       (long long)json_integer_value(
			       json_object_get(e, "attempt")),
		       note != NULL ? ": " : "", note != NULL ? note : "");
	}
	json_decref(ans);
	return 0;
}
