//! Each configuration's lease, as templates/manifest.yaml gives it (`lease_ms`): the one place it
//! is written. The generator derives the cells' bounds from that number and the providers set it
//! on every channel they make, so the two cannot drift apart.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use serde::Deserialize;

/// The manifest, as the generator reads it.
const MANIFEST: &str = include_str!("../../templates/manifest.yaml");

#[derive(Deserialize)]
struct Manifest {
    configurations: Vec<Configuration>,
}

#[derive(Deserialize)]
struct Configuration {
    name: String,
    lease_ms: Option<u64>,
}

fn leases() -> &'static HashMap<String, Option<Duration>> {
    static LEASES: OnceLock<HashMap<String, Option<Duration>>> = OnceLock::new();
    LEASES.get_or_init(|| {
        // The generator validated this very file before any cell was rendered from it.
        let manifest: Manifest = serde_yaml::from_str(MANIFEST).expect("templates/manifest.yaml parses");
        manifest
            .configurations
            .into_iter()
            .map(|configuration| (configuration.name, configuration.lease_ms.map(Duration::from_millis)))
            .collect()
    })
}

/// `configuration`'s lease; `None` when its broker has none (or it is not the provider's to set).
pub fn of(configuration: &str) -> Option<Duration> {
    *leases()
        .get(configuration)
        .unwrap_or_else(|| panic!("templates/manifest.yaml has no configuration {configuration:?}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_lease_is_the_manifests() {
        assert_eq!(super::of("postgres"), Some(std::time::Duration::from_millis(8000)));
        assert_eq!(super::of("memory"), None);
    }
}
