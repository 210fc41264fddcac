// libFuzzer harness: the .npy reader on arbitrary bytes; every element of an accepted array is read.
#include "fuzz_input_file.hpp"

#include <tilestream/error.hpp>
#include <tilestream/npy.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    tilestream::fuzz::memory_file file(data, size);
    if (!file.ok()) return 0;
    try {
        const auto a = tilestream::read_npy(file.path());
        // Reading every element finds a view that reaches past the mapping.
        double sum = 0;
        tilestream::visit_dtype(a.type(), [&]<class T>() {
            const auto v = a.view<T>();
            // No elements: nothing to read (a shape of (6666666666666663, 0) is valid, and looping
            // over its rows alone hung this harness past libFuzzer's timeout).
            if (v.rows() == 0 || v.cols() == 0) return;
            for (tilestream::index_t i = 0; i < v.rows(); ++i)
                for (tilestream::index_t j = 0; j < v.cols(); ++j) {
                    if constexpr (tilestream::is_complex_v<T>)
                        sum += double(v(i, j).real()) + double(v(i, j).imag());
                    else
                        sum += double(v(i, j));
                }
        });
        a.check_unchanged();
        volatile double sink = sum;
        (void)sink;
    } catch (const tilestream::error&) {
        // A clear error is the expected outcome for most inputs.
    }
    return 0;
}
