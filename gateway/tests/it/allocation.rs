//! Proves `delivery_count::resolve` and `normalise` allocate nothing: a counting global
//! allocator, counted per thread so that tests running in parallel do not interfere.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use gateway::delivery_count::{normalise, resolve};
use gateway::rejection::keys;
use gateway::{Bag, BagValue};

struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

fn allocations_during(work: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    work();
    ALLOCATIONS.with(Cell::get) - before
}

#[test]
fn the_counting_allocator_sees_allocations() {
    // Guards the proof below: an allocator that counted nothing would make it vacuous.
    let counted = allocations_during(|| drop(std::hint::black_box(vec![1u8; 64])));
    assert_eq!(counted, 1);
}

#[test]
fn resolve_and_normalise_allocate_nothing() {
    let mut routed = Bag::new();
    routed.insert(keys::REJECTION_REASON.to_owned(), BagValue::from("DeliveryError"));
    routed.insert("orderId".to_owned(), BagValue::from("42"));
    let mut ordinary = Bag::new();
    ordinary.insert("orderId".to_owned(), BagValue::from("42"));

    let counted = allocations_during(|| {
        let mut total = 0u64;
        for broker in [None, Some(-1), Some(0), Some(1), Some(2), Some(3), Some(i64::MAX)] {
            total += u64::from(std::hint::black_box(normalise(broker)));
            total += u64::from(resolve(std::hint::black_box(4), broker, std::hint::black_box(&routed)));
            total += u64::from(resolve(std::hint::black_box(4), broker, std::hint::black_box(&ordinary)));
        }
        std::hint::black_box(total);
    });
    assert_eq!(counted, 0);
}
