"""The database: its connection pool, sessions, tables, migrations run, and the SQLite write lane."""
