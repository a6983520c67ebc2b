#ifndef PROPHET_URL_H
#define PROPHET_URL_H

/* scheme://[user[:password]@]host[:port][/path]; user and password
 * percent-decoded. Missing parts are NULL (port 0). */
struct url {
	char *scheme;
	char *user;
	char *password;
	char *host;
	int port;
	char *path;
};

int url_parse(const char *s, struct url *u, char *err, size_t errlen);
void url_clear(struct url *u);
/* "host:port" or "[v6]:port"; host is copied into buf. */
int hostport_parse(const char *s, char *host, size_t hostlen, int *port);

#endif
