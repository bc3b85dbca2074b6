-- asyncpg: after its type introspection (restores jit)
-- params: ["on"]
SELECT
	                    set_config('jit', $1, false)
