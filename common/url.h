#ifndef PROPHET_URL_H
#define PROPHET_URL_H

/* scheme://[user[:password]@]host[:port][/path[?query]]; user and
 * password percent-decoded, query as written ("a=1&b=2", only after a
 * path). Missing parts are NULL (port 0). */
struct url {
	char *scheme;
	char *user;
	char *password;
	char *host;
	int port;
	char *path;
	char *query;
};

/* Errors never quote the text: it may hold a password. */
int url_parse(const char *s, struct url *u, char *err, size_t errlen);
void url_clear(struct url *u);
/* "host:port" or "[v6]:port"; host is copied into buf. */
int hostport_parse(const char *s, char *host, size_t hostlen, int *port);
/* Whether host (a name or an address literal, no brackets) is this
 * machine's loopback: localhost, *.localhost, 127.0.0.0/8, ::1 (also as
 * ::ffff:127.x.y.z). */
int url_host_is_loopback(const char *host);
/* The same for a listen address ("host:port", "[v6]:port"); 0 if it does
 * not parse. */
int url_listen_is_loopback(const char *listen);
/*
 * The value of parameter name in a query ("a=1&b=x%2Fy"), percent-decoded,
 * as a new string; NULL if absent. A name given twice is -1 from
 * url_query_check.
 */
char *url_query_get(const char *query, const char *name);
/* Every parameter of query is one of names (NULL-terminated), once. */
int url_query_check(const char *query, const char *const *names, char *err,
		    size_t errlen);

#endif
