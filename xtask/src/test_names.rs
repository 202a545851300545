//! A generated test's identity, taken apart and put together in this one place. The generator
//! lays each cell out as `generated/tests/<transport>/<configuration module>/<variant>/<behaviour
//! module>.rs` (the modules from `ConfigurationEntry::module` and `Behaviour::module`), so a
//! test's path in its binary is `<configuration module>::<variant>::<behaviour module>::<function>`.

use std::collections::BTreeMap;

use generator::manifest::Manifest;
use ledger::{Behaviour, CellId};

/// One generated test: the cell it judges and the pump variant it runs in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TestCell {
    pub cell: CellId,
    pub variant: String,
}

impl TestCell {
    pub fn new(configuration: &str, behaviour: Behaviour, variant: &str) -> TestCell {
        TestCell { cell: CellId::new(configuration, behaviour), variant: variant.to_owned() }
    }
}

/// Reads test paths back into cells, and writes the filter that selects a cell's test.
pub struct TestNames {
    /// Each configuration's module, and back.
    configurations: BTreeMap<String, String>,
    modules: BTreeMap<String, String>,
}

impl TestNames {
    pub fn new(manifest: &Manifest) -> TestNames {
        let pairs = manifest.configurations.iter().map(|c| (c.module(), c.name.clone()));
        TestNames {
            configurations: pairs.clone().collect(),
            modules: pairs.map(|(module, name)| (name, module)).collect(),
        }
    }

    /// The test at `path`, when it is a generated cell of a configuration in the manifest.
    pub fn cell(&self, path: &str) -> Option<TestCell> {
        let mut parts = path.split("::");
        let (module, variant, behaviour) = (parts.next()?, parts.next()?, parts.next()?);
        parts.next()?;
        let configuration = self.configurations.get(module)?;
        Some(TestCell::new(configuration, Behaviour::from_module(behaviour)?, variant))
    }

    /// The libtest filter selecting exactly `test`.
    pub fn filter(&self, test: &TestCell) -> String {
        let module = &self.modules[&test.cell.configuration];
        format!("{module}::{}::{}::", test.variant, test.cell.behaviour.module())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> TestNames {
        let root = crate::root();
        TestNames::new(&Manifest::load(&root.join(generator::MANIFEST), &root.join("templates")).unwrap())
    }

    #[test]
    fn a_generated_path_reads_back_into_its_cell_and_its_filter_selects_it() {
        let names = names();
        let test = names.cell("sqs_fifo::proactor::fr_23::always_defers").unwrap();
        assert_eq!(test, TestCell::new("sqs-fifo", Behaviour::fr(23), "proactor"));
        assert_eq!(names.filter(&test), "sqs_fifo::proactor::fr_23::");
        assert_eq!(names.cell("kafka::reactor::dc_5::f"), Some(TestCell::new("kafka", Behaviour::dc(5), "reactor")));
    }

    #[test]
    fn other_tests_are_no_cells() {
        let names = names();
        assert_eq!(names.cell("bespoke::lease_lapse"), None);
        assert_eq!(names.cell("memory::reactor::fr_x::f"), None);
        assert_eq!(names.cell("no_such_configuration::reactor::fr_2::f"), None);
    }
}
