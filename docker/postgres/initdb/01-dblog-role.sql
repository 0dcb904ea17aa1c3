-- Runs once, when the data directory is first initialised (docker-entrypoint-initdb.d).
-- Creates a least-privilege role for dblog; see docs/sources/postgres.md.

CREATE ROLE dblog LOGIN REPLICATION PASSWORD 'dblog';

-- dblog runs CREATE SCHEMA IF NOT EXISTS dblog and CREATE TABLE IF NOT EXISTS dblog.watermark
-- on every start; PostgreSQL checks the CREATE right on the database even when the schema exists.
DO $$
BEGIN
  EXECUTE format('GRANT CREATE ON DATABASE %I TO dblog', current_database());
END
$$;

-- Chunk SELECTs need SELECT on every captured table.
GRANT USAGE ON SCHEMA public TO dblog;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO dblog;
-- Tables the postgres user creates later in public are readable too.
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO dblog;
