#!/usr/bin/env bash
# The entrypoint of the PostgreSQL stand-in image `cargo xtask brokers images` builds (Debian's
# postgresql-15), honouring the part of the official postgres image's interface that
# testcontainers-modules' Postgres uses, so one container definition runs either image:
# - POSTGRES_USER (default postgres) is the superuser, POSTGRES_PASSWORD its password, POSTGRES_DB
#   (default: the user's name) the database made for it, and POSTGRES_HOST_AUTH_METHOD (default
#   scram-sha-256) how every host connects; a password is required unless that method is trust;
# - *.sql files in /docker-entrypoint-initdb.d run once, in name order, on a temporary server
#   listening on no TCP port, whose log (with its "database system is ready to accept
#   connections") goes to stdout;
# - the arguments are the server's (e.g. `-c fsync=off`); the server then listens on every
#   interface (the container source publishes the port on 127.0.0.1 only) and logs to stderr,
#   where the same line says it accepts connections.
# The image runs this as the user postgres: the server refuses to run as root. The cluster lives
# in the container's own file system and goes with it.
set -euo pipefail
# The official image's command is `postgres` and its options; options alone are the server's too.
if [[ ${1:-} == postgres ]]; then
    shift
fi
bin=/usr/lib/postgresql/15/bin
data=${PGDATA:-/var/lib/postgresql/data}
user=${POSTGRES_USER:-postgres}
database=${POSTGRES_DB:-$user}
method=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
if [[ -z ${POSTGRES_PASSWORD:-} && $method != trust ]]; then
    echo "error: POSTGRES_PASSWORD is unset; set it, or POSTGRES_HOST_AUTH_METHOD=trust" >&2
    exit 1
fi

pwfile=$(mktemp)
printf '%s\n' "${POSTGRES_PASSWORD:-}" > "$pwfile"
password=()
[[ -n ${POSTGRES_PASSWORD:-} ]] && password=(--pwfile="$pwfile")
"$bin/initdb" -D "$data" -U "$user" "${password[@]}" -E UTF8 --locale=C.UTF-8 --auth-local=trust \
    --auth-host="$method" > /dev/null
rm -f "$pwfile"
echo "host all all all $method" >> "$data/pg_hba.conf"

# The temporary server: the database and the init scripts, over the socket only.
"$bin/pg_ctl" -D "$data" -o "-c listen_addresses='' -k /tmp" -w start
psql=("$bin/psql" -v ON_ERROR_STOP=1 --no-psqlrc -q -h /tmp -U "$user")
if [[ $database != postgres ]]; then
    "${psql[@]}" -d postgres -c "CREATE DATABASE \"$database\"" > /dev/null
fi
for script in /docker-entrypoint-initdb.d/*.sql; do
    if [[ -e $script ]]; then
        "${psql[@]}" -d "$database" -f "$script"
    fi
done
"$bin/pg_ctl" -D "$data" -m fast -w stop > /dev/null

exec "$bin/postgres" -D "$data" -c listen_addresses='*' -k /tmp "$@"
