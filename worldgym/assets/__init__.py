"""Files shipped with the package: small warm starts trained by this project (see ``warm_starts/README.md``)."""
