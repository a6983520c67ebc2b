#ifndef PROPHET_NETGUARD_H
#define PROPHET_NETGUARD_H

#include <stddef.h>

#include <sys/socket.h>

/*
 * Which addresses an outbound request (a callback) may connect to. Refused
 * by default: unspecified, loopback, private, shared (CGNAT), link-local,
 * multicast and reserved ranges of IPv4 and IPv6; an IPv4 address inside
 * IPv6 (mapped, compatible, NAT64 64:ff9b::/96, 6to4 2002::/16) is judged
 * by its IPv4 address. A list of CIDRs allows ranges again. The check is
 * meant for the address actually connected to, after DNS and redirects,
 * so a name that resolves to an internal address is refused too.
 */
struct netguard;

/*
 * allowed: CIDRs separated by commas or spaces ("10.1.0.0/16, fd00::/8",
 * a bare address is a /32 or /128), "" for none. Returns NULL with err
 * filled when an entry is not a CIDR.
 */
struct netguard *netguard_create(const char *allowed, char *err, size_t errlen);
void netguard_destroy(struct netguard *g);
/* 1 if a connection to sa (AF_INET or AF_INET6) may be made. */
int netguard_allows(const struct netguard *g, const struct sockaddr *sa,
		    size_t salen);
/* The same for an address in text form; 0 if it is not one. */
int netguard_allows_ip(const struct netguard *g, const char *ip);

#endif
