"""The ground floor: the catalog, epochs and lag, schemas, change chunks and Z-sets, errors, named
crash points and the Spark session's configuration. Imports nothing of sparkwave above it."""
