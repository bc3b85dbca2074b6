-- asyncpg: before its type introspection (turns JIT off for it)
SELECT
	                        current_setting('jit') AS cur,
	                        set_config('jit', 'off', false) AS new
