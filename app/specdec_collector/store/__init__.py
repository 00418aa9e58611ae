"""The database: its connection pool, sessions, tables, migrations, the write lanes, and the
store that decides where each piece of database work runs."""
