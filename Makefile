# Profiling shortcuts (docs/PROFILING.md). Everything else is plain cargo: see README.md.
PROFILE_ARGS ?= micro

.PHONY: profile-micro profile profile-clean

profile-micro:
	scripts/profile-training.sh micro

profile:
	scripts/profile-training.sh $(PROFILE_ARGS)

profile-clean:
	rm -rf target/profile
