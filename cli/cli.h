#ifndef PROPHET_CLI_H
#define PROPHET_CLI_H

#include <jansson.h>

struct cfg;

struct cli {
	struct cfg *cfg;
	char url[512];	  /* API base, no trailing slash */
	int json;	  /* --json: print the server's JSON */
	char token[300];  /* --token, PROPHET_TOKEN or http.token */
	char cacert[512]; /* --cacert or http.tls_ca; "": the system's */
	int insecure;	  /* --insecure: no certificate check */
	char cert[512];	  /* --client-cert or http.tls_client_cert; "": none */
	char key[512];	  /* --client-key or http.tls_client_key */
};

struct cli_cmd {
	const char *name;
	const char *usage;
	const char *help;
	int (*run)(struct cli *c, int argc, char **argv);
};

/*
 * Calls the API. Returns the HTTP status (0 if the server could not be
 * reached, with *errmsg set) and the parsed JSON answer in *out (NULL if it
 * was not JSON).
 */
long cli_request(const struct cli *c, const char *method, const char *path,
		 const char *body, json_t **out, char *errmsg, size_t errlen);
/* Prints an API error answer ({"error":{...}}) or a transport error. */
int cli_fail(long status, const json_t *answer, const char *errmsg);
void cli_print_json(const json_t *j);
/* "1500" (ms), "1500ms", "30s", "5m", "2h", "1d" -> ms; -1 if invalid. */
long long cli_duration_ms(const char *s);
/* A whole decimal integer into *v: 0, or -1 for anything else ("", "x",
 * "2026-12-07", which strtoll would take as 2026). */
int cli_int(const char *s, long long *v);
/* cli_int for the value of option opt, saying what is wrong on stderr. */
int cli_int_opt(const char *opt, const char *s, long long *v);
/* "2026-11-30 12:41:29.335", local time, from ms since the epoch. */
const char *cli_time(long long ms, char *buf, size_t len);

/* "/v1/tasks/<id><rest>", the id escaped as one path segment (also the
 * ids "." and "..", which are valid). */
void cli_task_path(char *buf, size_t len, const char *id, const char *rest);
/* An integer field of an answer (0 if absent). */
long long cli_num(const json_t *o, const char *field);
/* "\r[####      ] " + fmt on stderr: a progress bar (done past total
 * shows full). */
void cli_bar(long long done, long long total, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/*
 * GETs path every interval_ms until its answer's "done" is true, calling
 * draw (on a terminal, not with --json) with each answer. Returns the last
 * answer (the caller frees it) with its status in *code: 200 when done,
 * else the failure as cli_request gave it.
 */
json_t *cli_follow(const struct cli *c, const char *path, unsigned interval_ms,
		   void (*draw)(const json_t *st), long *code, char *err,
		   size_t errlen);
int cmd_cluster(struct cli *c, int argc, char **argv);
int cmd_get(struct cli *c, int argc, char **argv);
int cmd_push(struct cli *c, int argc, char **argv);
int cmd_restore(struct cli *c, int argc, char **argv);
int cmd_cancel(struct cli *c, int argc, char **argv);
int cmd_reschedule(struct cli *c, int argc, char **argv);
int cmd_list(struct cli *c, int argc, char **argv);
int cmd_token_hash(struct cli *c, int argc, char **argv);
int cmd_prune(struct cli *c, int argc, char **argv);
int cmd_bulk(struct cli *c, int argc, char **argv);
int cmd_jobs(struct cli *c, int argc, char **argv);
int cmd_topics(struct cli *c, int argc, char **argv);
int cmd_pause(struct cli *c, int argc, char **argv);
int cmd_resume(struct cli *c, int argc, char **argv);
int cmd_schedule(struct cli *c, int argc, char **argv);

#endif
