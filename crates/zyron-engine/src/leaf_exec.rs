//! The `ExecutionPlan` methods every leaf scan (no children, no
//! expressions of its own) writes the same way: one macro serves them all.

/// Expands, inside `impl ExecutionPlan for X`, to `properties`, `children`,
/// `apply_expressions`, `replace_children` and `with_new_children` for a leaf
/// node whose `properties` field holds its `Arc<PlanProperties>`.
macro_rules! leaf_exec_methods {
    () => {
        fn properties(&self) -> &std::sync::Arc<datafusion::physical_plan::PlanProperties> {
            &self.properties
        }

        fn children(&self) -> Vec<&std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
            vec![]
        }

        fn apply_expressions(
            &self,
            _f: &mut dyn FnMut(
                &std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>,
            ) -> datafusion::common::Result<datafusion::common::tree_node::TreeNodeRecursion>,
        ) -> datafusion::common::Result<datafusion::common::tree_node::TreeNodeRecursion> {
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        }

        fn replace_children(
            self: std::sync::Arc<Self>,
            _: Vec<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>>,
            _: datafusion::physical_plan::execution_plan::ReplaceChildrenOptions,
        ) -> datafusion::common::Result<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
            Ok(self)
        }

        fn with_new_children(
            self: std::sync::Arc<Self>,
            _children: Vec<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>>,
        ) -> datafusion::common::Result<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
            Ok(self)
        }
    };
}

pub(crate) use leaf_exec_methods;

/// Expands to `partition_statistics` for a scan that knows its statistics
/// as a whole (field `statistics: Arc<Statistics>`) but not per partition.
macro_rules! whole_scan_statistics {
    () => {
        fn partition_statistics(
            &self,
            partition: Option<usize>,
        ) -> datafusion::common::Result<std::sync::Arc<datafusion::common::Statistics>> {
            Ok(match partition {
                None => self.statistics.clone(),
                Some(_) => {
                    std::sync::Arc::new(datafusion::common::Statistics::new_unknown(&self.schema))
                }
            })
        }
    };
}

pub(crate) use whole_scan_statistics;
