#ifndef PROPHET_SCRIPTS_H
#define PROPHET_SCRIPTS_H

/*
 * The Redis Lua scripts: SCRIPT_<NAME> is proto/lua/<name>.lua (its keys,
 * arguments and answer are described there), compiled in by make
 * (scripts/lua-c; the lib_*.lua files hold functions that several scripts
 * include). Every script touches the keys of one slot only (KEYS share
 * the {prophet:N} hash tag). common/redis.h's redis_eval_args sends one as
 * EVALSHA, its text once per connection.
 */
extern const char SCRIPT_ATTEMPTED[];
extern const char SCRIPT_BACKLOG[];
extern const char SCRIPT_BULK_CANCEL[];
extern const char SCRIPT_BULK_RESCHEDULE[];
extern const char SCRIPT_CANCEL[];
extern const char SCRIPT_CANCEL_SERIES[];
extern const char SCRIPT_CLAIM[];
extern const char SCRIPT_CRON_NEXT[];
extern const char SCRIPT_FENCE[];
extern const char SCRIPT_FORGET[];
extern const char SCRIPT_GIVEBACK[];
extern const char SCRIPT_HOLD[];
extern const char SCRIPT_INDEX[];
extern const char SCRIPT_LIFT[];
extern const char SCRIPT_MOVE[];
extern const char SCRIPT_MOVED_TRIM[];
extern const char SCRIPT_REQUEUE[];
extern const char SCRIPT_RESCHEDULE[];
extern const char SCRIPT_RESET[];
extern const char SCRIPT_SCHED_COUNT[];
extern const char SCRIPT_SKIP[];
extern const char SCRIPT_UNCANCEL[];
extern const char SCRIPT_UNCLAIM[];

#endif
