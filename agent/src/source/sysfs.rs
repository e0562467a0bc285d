//! Reading sysfs attribute files (owned by the sources work).
