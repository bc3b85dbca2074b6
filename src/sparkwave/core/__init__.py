"""The ground floor: catalog, epochs, schemas, change chunks and Z-sets, errors. Imports nothing
of sparkwave above it."""
